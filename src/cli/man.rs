//! `git swarm man`: print the manual page `git-swarm(1)` (roff), as `git swarm setup` installs it.
//!
//! `git swarm --help` is turned by git into `git help swarm`, which runs `man git-swarm`: the page is the
//! command-line reference of every subcommand, generated from the same clap definitions as `-h`, plus the
//! sections clap does not know (configuration and its precedence, environment, files, exit status).

use std::io::Write;

use clap::CommandFactory;
use clap_mangen::roff::{Roff, bold, italic, roman};

use super::{Cli, CliError, CliResult};

#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {}

pub(super) fn run(_args: ManArgs) -> CliResult<()> {
    let page = render().map_err(|e| CliError::io(format!("cannot render the manual page: {e}")))?;
    let mut out = std::io::stdout().lock();
    out.write_all(&page).map_err(|e| CliError::io(format!("cannot write the manual page: {e}")))?;
    Ok(())
}

/// The whole page `git-swarm(1)`.
pub(super) fn render() -> std::io::Result<Vec<u8>> {
    let cmd = Cli::command().name("git-swarm").bin_name("git swarm");
    let man = clap_mangen::Man::new(cmd.clone())
        .title("GIT-SWARM")
        .section("1")
        .manual("Git Manual")
        .source(format!("git-swarm {}", env!("CARGO_PKG_VERSION")));
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    // clap_mangen's synopsis drops the value names of options (`[-C ]`): the page writes its own, as each
    // command's entry below does.
    synopsis(&cmd).to_writer(&mut buf)?;
    man.render_description_section(&mut buf)?;
    man.render_options_section(&mut buf)?;
    commands_section(&cmd).to_writer(&mut buf)?;
    extra_sections().to_writer(&mut buf)?;
    man.render_version_section(&mut buf)?;
    Ok(buf)
}

/// Every subcommand with its synopsis, what it does, and its own flags (the page is the whole reference, as git's
/// pages are; `git swarm <command> -h` shows the same from the terminal).
fn commands_section(cmd: &clap::Command) -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["COMMANDS"]);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        commands_entry(&mut r, sub, &format!("git swarm {}", sub.get_name()));
        for leaf in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
            commands_entry(&mut r, leaf, &format!("git swarm {} {}", sub.get_name(), leaf.get_name()));
        }
    }
    r
}

/// `git swarm [-C <DIR>] [--remote <NAME-OR-URL>] … <command> [<args>]`.
fn synopsis(cmd: &clap::Command) -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["SYNOPSIS"]);
    let mut line = vec![bold("git swarm")];
    let globals = cmd.get_arguments().filter(|a| a.is_global_set() && !a.is_hide_set());
    line.extend(words(globals));
    line.push(roman(" <command> [<args>]"));
    r.text(line);
    r
}

/// The synopsis words of `args`: `[--flag <VALUE>]`, `<POSITIONAL>`, each after a space.
fn words<'a>(args: impl Iterator<Item = &'a clap::Arg>) -> Vec<clap_mangen::roff::Inline> {
    let mut usage = Vec::new();
    for a in args {
        let name = match (a.get_long(), a.get_short()) {
            (Some(l), _) => format!("--{l}"),
            (None, Some(s)) => format!("-{s}"),
            (None, None) => String::new(),
        };
        let value = a.get_value_names().map(|v| v.iter().map(|v| format!("<{v}>")).collect::<Vec<_>>().join(" "));
        let word = match (name.is_empty(), value, a.get_action().takes_values()) {
            (true, Some(v), _) => v,
            (true, None, _) => format!("<{}>", a.get_id()),
            (false, Some(v), true) => format!("{name} {v}"),
            (false, _, _) => name,
        };
        let word = if a.is_required_set() { word } else { format!("[{word}]") };
        usage.push(roman(" "));
        usage.push(roman(word));
    }
    usage
}

fn commands_entry(r: &mut Roff, sub: &clap::Command, path: &str) {
    let mut usage = vec![bold(path.to_string())];
    usage.extend(words(sub.get_arguments().filter(|a| !a.is_hide_set() && !a.is_global_set())));
    r.control("TP", []);
    r.text(usage);
    let about = sub.get_long_about().or(sub.get_about()).map(|s| s.to_string()).unwrap_or_default();
    r.text([roman(about)]);
    for a in sub.get_arguments().filter(|a| !a.is_hide_set() && !a.is_global_set()) {
        let Some(help) = a.get_long_help().or(a.get_help()).map(|h| h.to_string()) else { continue };
        let name = match (a.get_long(), a.get_short()) {
            (Some(l), _) => format!("--{l}"),
            (None, Some(s)) => format!("-{s}"),
            (None, None) => format!("<{}>", a.get_id()),
        };
        r.control("RS", []);
        r.control("TP", []);
        r.text([italic(name)]);
        r.text([roman(help)]);
        r.control("RE", []);
    }
}

fn para(r: &mut Roff, text: &str) {
    r.control("PP", []);
    r.text([roman(text)]);
}

fn item(r: &mut Roff, head: &str, text: &str) {
    r.control("TP", []);
    r.text([bold(head)]);
    r.text([roman(text)]);
}

/// What clap does not know: configuration, environment, files, exit status, see also.
fn extra_sections() -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["CONFIGURATION"]);
    para(
        &mut r,
        "Settings shared by every clone live in swarm.toml on the state ref (see git swarm init --config). \
         A clone may override some of them for itself with git config swarm.* (in .git/config, ~/.gitconfig or \
         git -c). The first of these that sets a value wins:",
    );
    item(&mut r, "1.", "a command-line flag (--remote, --swarm, --agent, --exec, --check, --lease, ...);");
    item(&mut r, "2.", "an environment variable (GIT_SWARM_REMOTE, GIT_SWARM_SWARM, GIT_SWARM_AGENT, ...);");
    item(
        &mut r,
        "3.",
        "git config swarm.* in git's own order (git -c, then the worktree's config, the repository's, the \
         global and the system one);",
    );
    item(&mut r, "4.", "swarm.toml on the state ref;");
    item(&mut r, "5.", "the built-in default.");
    para(&mut r, "The git config keys:");
    for (key, what) in crate::config::keys() {
        item(&mut r, key, &what);
    }
    r.control("SH", ["ENVIRONMENT"]);
    para(
        &mut r,
        "Read once, when the command starts. A GIT_SWARM_* variable whose value cannot be used stops the command \
         (exit 2, the variable named; the hooks' handlers warn and take it as unset); set to nothing, it is unset.",
    );
    // The declaration the table of docs/configuration.md is made from too.
    for v in crate::environment::Var::ALL {
        let text = format!("{} Its value: {}.", v.meaning(), v.rule());
        item(&mut r, v.name(), &text.replace('`', ""));
    }
    item(&mut r, "GIT_DIR, GIT_WORK_TREE, GIT_COMMON_DIR", "as in git: which repository the command works in.");
    r.control("SH", ["FILES"]);
    item(
        &mut r,
        "refs/swarm/<name>",
        "the swarm's state ref on the remote: tasks, plans, cycles and settings (swarm.toml), one commit per op.",
    );
    item(&mut r, "$GIT_COMMON_DIR/swarm/", "this clone's runner files: logs, work trees, records of what it saw.");
    r.control("SH", ["EXIT STATUS"]);
    for (code, what) in [
        ("0", "success."),
        ("1", "an error: git, the network, a file, a state ref that cannot be read."),
        ("2", "bad usage or bad input: an unknown command or flag, a bad value (the message names the culprit)."),
        ("3", "claim without an id found no ready task."),
        ("4", "refused by the swarm's state: not found, not yours, not ready, already done."),
    ] {
        item(&mut r, code, what);
    }
    r.control("SH", ["SEE ALSO"]);
    r.text([roman(
        "git(1), git-config(1), githooks(5); the documentation in docs/ of the git-swarm sources: protocol.md, \
         agents.md, github-actions.md, configuration.md.",
    )]);
    r
}
