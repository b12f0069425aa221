//! `git swarm completions <shell>`: print the shell completion script (bash, zsh, fish), as `git swarm setup`
//! installs it.
//!
//! Each script completes the command `git-swarm` and, through git's own completion, `git swarm`:
//! * bash: git's completion (git-completion.bash) calls `_git_swarm` for `git swarm <TAB>`, loading the file
//!   `completions/git-swarm` of bash-completion's search path when the function is not defined yet; the script
//!   defines it as a bridge to clap's `_git__swarm`.
//! * zsh: git's `_git` calls `_git-swarm` for `git swarm <TAB>`; clap's script defines exactly that function.
//! * fish: fish's git completion runs `git-<cmd>`'s completions for `git <cmd>` on every `git-*` on `PATH`.

use std::io::Write;

use clap::CommandFactory;
use clap_complete::Shell;

use super::{Cli, CliError, CliResult};

#[derive(Debug, clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, zsh or fish.
    #[arg(value_parser = ["bash", "zsh", "fish"])]
    pub shell: String,
}

pub(super) fn run(args: CompletionsArgs) -> CliResult<()> {
    let shell = parse_shell(&args.shell)?;
    let script = script(shell);
    let mut out = std::io::stdout().lock();
    out.write_all(&script).map_err(|e| CliError::io(format!("cannot write the completion script: {e}")))?;
    Ok(())
}

pub(super) fn parse_shell(name: &str) -> CliResult<Shell> {
    match name {
        "bash" => Ok(Shell::Bash),
        "zsh" => Ok(Shell::Zsh),
        "fish" => Ok(Shell::Fish),
        other => Err(CliError::usage(format!("'{other}': not a shell with completions (bash, zsh or fish)"))),
    }
}

/// The bridge from git's bash completion to clap's: `words`, `cword` and `__git_cmd_idx` are git-completion's
/// (the words of the line, the one under the cursor, where the git command is); clap's function reads
/// `COMP_WORDS`/`COMP_CWORD` and its arguments as bash passes them to a `complete -F` function.
const BASH_GIT_BRIDGE: &str = r#"
# `git swarm <TAB>`: git's completion calls _git_swarm (and loads this file, named git-swarm, when it is missing).
_git_swarm() {
    local __gs_idx=${__git_cmd_idx:-1}
    local -a COMP_WORDS=(git-swarm "${words[@]:__gs_idx+1}")
    local COMP_CWORD=$((cword - __gs_idx))
    local __gs_prev=""
    ((COMP_CWORD > 0)) && __gs_prev=${COMP_WORDS[COMP_CWORD-1]}
    _git__swarm git-swarm "${COMP_WORDS[COMP_CWORD]}" "$__gs_prev"
}
"#;

/// The script for `shell`.
pub(super) fn script(shell: Shell) -> Vec<u8> {
    let mut cmd = Cli::command().bin_name("git-swarm");
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "git-swarm", &mut buf);
    if shell == Shell::Bash {
        // clap_complete 4.6 names the cases of a subcommand's options after the binary's name with its '-' made
        // a subcommand separator (`git__subcmd__swarm__subcmd__claim`) but the subcommand itself after the name
        // with '-' made `__` (`git__swarm__subcmd__claim`): no option of any subcommand would ever complete. One
        // spelling for both (the test `bash_completes_a_subcommand_s_flags` fails if the workaround goes stale).
        let text = String::from_utf8_lossy(&buf).replace("git__subcmd__swarm", "git__swarm");
        buf = text.into_bytes();
        buf.extend_from_slice(BASH_GIT_BRIDGE.as_bytes());
    }
    buf
}
