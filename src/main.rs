//! `git-swarm`: the command line. All the work is in the `git_swarm` library; `cli` parses and prints.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
