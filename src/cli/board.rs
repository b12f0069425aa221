//! `git swarm board`: the board as one self-contained HTML page (`--html <file>`, `-` for stdout) — plan tree,
//! dependency graph coloured by status, a timeline of agents and their tasks, throughput over time — or as JSON
//! (`--json`, `docs/json.md`). Without either it prints a text frame, as `git swarm watch --once` does.

use std::io::Write;
use std::path::PathBuf;

use git_swarm::board::{Loaded, Options, html};

use super::frame;
use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub struct BoardArgs {
    /// Write the page to this file (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Read at most this many ops of the log (the timeline and throughput start at the oldest one read).
    #[arg(long, default_value_t = 20_000, value_name = "N")]
    log_limit: usize,
}

pub fn run(ctx: &mut Ctx, args: BoardArgs) -> CliResult<()> {
    if args.log_limit == 0 {
        return Err(CliError::usage("--log-limit: at least 1"));
    }
    if ctx.out.json && args.html.is_some() {
        return Err(CliError::usage("board: --json and --html are two outputs; pick one"));
    }
    let swarm = ctx.swarm()?;
    let loaded = Loaded::read(&swarm, true, args.log_limit)?;
    ctx.out.problems(&loaded.snapshot.problems);
    let view = loaded.view(&swarm, ctx.now(), &Options::default());
    match &args.html {
        Some(path) => {
            let page = html::render(&view);
            if path.as_os_str() == "-" {
                let mut out = std::io::stdout().lock();
                // A closed stdout ends output quietly, as for every command.
                let _ = out.write_all(page.as_bytes()).and_then(|_| out.flush());
            } else {
                write_file(path, &page)?;
                ctx.out.note(format!(
                    "wrote {} ({} tasks, {} ops of the log)",
                    path.display(),
                    view.total,
                    view.log_ops
                ));
            }
        }
        None => {
            let head = frame::head("board", &swarm, &view);
            ctx.out.line(frame::render(&view, &head, None).trim_end());
            ctx.out.doc(&serde_json::to_value(&view).map_err(|e| CliError::io(format!("board: {e}")))?);
        }
    }
    Ok(())
}

/// Write through a temp file in the same directory and rename, so that a browser reloading the page never sees
/// half of it. A path that is no regular file (`/dev/stdout`, `/dev/null`, a FIFO) is written to, never replaced;
/// a symbolic link is followed, so the file it names gets the page and the link stays.
fn write_file(path: &std::path::Path, text: &str) -> CliResult<()> {
    let fail = |e: std::io::Error| CliError::io(format!("--html {}: {e}", path.display()));
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.is_file() {
            let mut f = std::fs::OpenOptions::new().write(true).open(path).map_err(fail)?;
            return f.write_all(text.as_bytes()).and_then(|()| f.flush()).map_err(fail);
        }
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return write_file(&std::fs::canonicalize(path).map_err(fail)?, text);
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(fail)?;
    tmp.write_all(text.as_bytes()).map_err(fail)?;
    // A page to open and share, not a secret (a temp file is created 0600).
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(fail)?;
    tmp.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}
