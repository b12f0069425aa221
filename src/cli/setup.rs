//! `git swarm setup`: install the manual page and the shell completions for this user, beside the binary.
//!
//! `cargo install` installs a binary only; git turns `git swarm --help` into `man git-swarm`, and git's shell
//! completion looks for `git swarm`'s completion in the shells' usual places. This command puts each file there
//! (see `docs/configuration.md`, "Manual page and completions"):
//! * `<prefix>/share/man/man1/git-swarm.1`, where `<prefix>` is the folder above the binary's (`~/.cargo` for
//!   `cargo install`): man finds it through `PATH` (`<prefix>/bin` → `<prefix>/share/man`) with no `MANPATH`;
//! * bash: `${BASH_COMPLETION_USER_DIR:-${XDG_DATA_HOME:-~/.local/share}/bash-completion}/completions/git-swarm`,
//!   which bash-completion loads on demand for `git-swarm` and git's completion for `git swarm`;
//! * zsh: `<prefix>/share/zsh/site-functions/_git-swarm` (on zsh's `fpath` for `/usr/local`; else add it);
//! * fish: `${XDG_CONFIG_HOME:-~/.config}/fish/completions/git-swarm.fish`.
//!
//! Files are replaced only when their content differs; nothing else is touched.

use std::path::{Path, PathBuf};

use clap_complete::Shell;
use serde_json::json;

use super::{CliError, CliResult, Printer};
use crate::environment::Environment;

#[derive(Debug, clap::Args)]
pub(crate) struct SetupArgs {
    /// Install under <DIR>/share [default: the folder above the one holding this binary].
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
    /// Install the manual page only.
    #[arg(long, conflicts_with = "no_man")]
    pub no_completions: bool,
    /// Install the completions only.
    #[arg(long)]
    pub no_man: bool,
}

struct Install {
    what: &'static str,
    path: PathBuf,
    content: Vec<u8>,
}

pub(super) fn run(out: &Printer, args: SetupArgs, env: &Environment) -> CliResult<()> {
    let prefix = match args.prefix {
        Some(p) => std::path::absolute(&p).unwrap_or(p),
        None => default_prefix()?,
    };
    let mut todo = Vec::new();
    if !args.no_man {
        let page = super::man::render().map_err(|e| CliError::io(format!("cannot render the manual page: {e}")))?;
        todo.push(Install { what: "man", path: man_path(&prefix), content: page });
    }
    if !args.no_completions {
        let home = env.home().ok_or_else(|| {
            CliError::usage("HOME is not set (or not an absolute path): cannot tell where the completions go")
        })?;
        for (what, shell, path) in [
            ("bash", Shell::Bash, bash_path(env, home)),
            ("zsh", Shell::Zsh, prefix.join("share/zsh/site-functions/_git-swarm")),
            ("fish", Shell::Fish, fish_path(env, home)),
        ] {
            todo.push(Install { what, path, content: super::completions::script(shell) });
        }
    }
    let mut done = Vec::new();
    for i in &todo {
        let changed = write_if_changed(&i.path, &i.content)?;
        done.push(json!({"what": i.what, "path": i.path.to_string_lossy(), "changed": changed}));
    }
    let man_found = !args.no_man && man_dir_searched(&prefix);
    if out.json {
        out.doc(&json!({"installed": done, "prefix": prefix.to_string_lossy(), "man_found": man_found}));
        return Ok(());
    }
    for i in &todo {
        out.line(format!("{:<5} {}", i.what, i.path.display()));
    }
    if !args.no_man && !man_found {
        out.note(format!(
            "hint: man does not search {} yet: put {} on PATH, or add that folder to MANPATH",
            prefix.join("share/man").display(),
            prefix.join("bin").display()
        ));
    }
    if !args.no_completions {
        out.note(format!(
            "hint: zsh needs `fpath+=({})` before compinit in ~/.zshrc unless that folder is on fpath already",
            prefix.join("share/zsh/site-functions").display()
        ));
    }
    Ok(())
}

fn default_prefix() -> CliResult<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| CliError::io(format!("cannot find this binary's path: {e}")))?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| CliError::usage(format!("{}: no folder above the binary's; give --prefix", exe.display())))
}

pub(super) fn man_path(prefix: &Path) -> PathBuf {
    prefix.join("share/man/man1/git-swarm.1")
}

fn bash_path(env: &Environment, home: &Path) -> PathBuf {
    let base = env
        .bash_completion_user_dir()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| env.data_home().unwrap_or_else(|| home.join(".local/share")).join("bash-completion"));
    base.join("completions/git-swarm")
}

fn fish_path(env: &Environment, home: &Path) -> PathBuf {
    env.config_home().unwrap_or_else(|| home.join(".config")).join("fish/completions/git-swarm.fish")
}

/// Write `content` to `path` (through a temporary file and a rename) unless it holds exactly that already.
fn write_if_changed(path: &Path, content: &[u8]) -> CliResult<bool> {
    if std::fs::read(path).is_ok_and(|old| old == content) {
        return Ok(false);
    }
    let fail = |e: std::io::Error| CliError::io(format!("cannot write {}: {e}", path.display()));
    let dir = path.parent().ok_or_else(|| CliError::usage(format!("{}: no parent folder", path.display())))?;
    std::fs::create_dir_all(dir).map_err(fail)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(fail)?;
    std::io::Write::write_all(&mut tmp, content).map_err(fail)?;
    // Readable by everyone, as man pages and completions are (a temporary file is the owner's only).
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(fail)?;
    tmp.persist(path).map_err(|e| fail(e.error))?;
    Ok(true)
}

/// Does `man` search `<prefix>/share/man` (as `manpath` reports)? False when it cannot tell.
fn man_dir_searched(prefix: &Path) -> bool {
    let Ok(out) = std::process::Command::new("manpath").stderr(std::process::Stdio::null()).output() else {
        return false;
    };
    let want = prefix.join("share/man");
    String::from_utf8_lossy(&out.stdout).trim().split(':').any(|d| Path::new(d) == want)
}
