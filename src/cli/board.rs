//! `git swarm board`: the board as one self-contained HTML page (`--html <file>`, `-` for stdout) — plan tree,
//! dependency graph coloured by status, a timeline of agents and their tasks, throughput over time — or as JSON
//! (`--json`, `docs/json.md`). Without either it prints a text frame, as `git swarm watch --once` does.
//! `--serve` serves a live page of it on 127.0.0.1 until Ctrl-C (`crate::board::serve`, docs/board.md).

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::board::live::Budgets;
use crate::board::serve::{Follow, Listening, ServeError, State};
use crate::board::{Loaded, Options, html};

use super::frame;
use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct BoardArgs {
    /// Write the page to this file (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Read at most this many ops of the log (the timeline and throughput start at the oldest one read).
    #[arg(long, default_value_t = 20_000, value_name = "N")]
    log_limit: usize,
    /// Serve a live page of the board over HTTP until Ctrl-C, updated as the state ref moves.
    #[arg(long, conflicts_with = "html")]
    serve: bool,
    /// With --serve: the port (0: a free one, printed).
    #[arg(long, default_value_t = DEFAULT_PORT, value_name = "N", requires = "serve")]
    port: u16,
    /// With --serve: the address to listen on. Anything but a loopback address shows the board to the network.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDRESS", requires = "serve")]
    bind: IpAddr,
    /// With --serve: how often to fetch a remote that cannot be watched for file events (a URL), and the fallback
    /// poll of one that can.
    #[arg(long, default_value = "2s", value_parser = super::watch::parse_interval, value_name = "DURATION", requires = "serve")]
    interval: Duration,
}

/// The port of `board --serve` unless `--port` says otherwise.
pub(super) const DEFAULT_PORT: u16 = 8377;

pub(super) fn run(ctx: &mut Ctx, args: BoardArgs) -> CliResult<()> {
    if args.log_limit == 0 {
        return Err(CliError::usage("--log-limit: at least 1"));
    }
    if ctx.out.json && args.html.is_some() {
        return Err(CliError::usage("board: --json and --html are two outputs; pick one"));
    }
    if args.serve {
        return serve(ctx, &args);
    }
    let swarm = ctx.swarm()?;
    let loaded = Loaded::read(&swarm, true, args.log_limit)?;
    ctx.out.problems(&loaded.snapshot.problems);
    let view = loaded.view(&swarm, ctx.now(), &Options::default(), &local_runs(&swarm, &ctx.env));
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

/// What this clone's runners do now: shown beside what the ref knows of their claims.
pub(super) fn local_runs(
    swarm: &crate::Swarm,
    env: &crate::environment::Environment,
) -> Vec<crate::runner::status::LocalRun> {
    crate::runner::status::read_all(&crate::runner::Places::of(swarm.local.repo.common_dir(), env))
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

/// `--serve`: listen first (a port in use fails before anything is read), read the board, say where it is (stderr;
/// `--json`: one document on stdout), then serve until Ctrl-C, a line on stderr per new state.
fn serve(ctx: &mut Ctx, args: &BoardArgs) -> CliResult<()> {
    let stop = super::run::stop_flag();
    let started = Instant::now();
    let listening = Listening::bind(args.bind, args.port).map_err(|e| match e {
        ServeError::PortInUse { port, .. } => CliError::io(e.to_string()).hint(format!(
            "pick another with --port (--port 0: a free one); `ss -ltnp 'sport = :{port}'` names the program"
        )),
        e => CliError::io(e.to_string()),
    })?;
    let swarm = ctx.swarm()?;
    let loaded = Loaded::read(&swarm, true, args.log_limit)?;
    ctx.out.problems(&loaded.snapshot.problems);
    let url = listening.url();
    if !args.bind.is_loopback() {
        ctx.out.warn(format!(
            "--bind {}: anyone who can reach this address can read the board (titles, agents, reasons, hand-off notes)",
            args.bind
        ));
    }
    eprintln!(
        "serving the board of {} at {url} (read {} tasks in {} ms; Ctrl-C stops)",
        swarm.name,
        loaded.snapshot.board.tasks.len() + loaded.snapshot.board.closed.len(),
        started.elapsed().as_millis()
    );
    ctx.out.doc(&serde_json::json!({
        "url": url,
        "bind": listening.addr().ip().to_string(),
        "port": listening.addr().port(),
        "swarm": swarm.name,
        "remote": swarm.remote_label,
    }));
    let _ = std::io::stdout().flush();
    let local = ctx.git_config().ok();
    let budgets = move |board: &crate::ops::Board| {
        let settings = local
            .as_ref()
            .and_then(|l| crate::runner::RunSettings::from_config(&l.apply(&board.config)).ok())
            .unwrap_or_default();
        Budgets { cycle: settings.budget.cycle(), task: settings.budget.task() }
    };
    let json = ctx.out.json;
    let on_state = |s: &State| {
        if !json {
            eprintln!(
                "state {}: {} tasks, read in {} ms, page in {} ms",
                crate::short(&s.commit),
                s.tasks,
                s.read.as_millis(),
                s.render.as_millis()
            );
        }
    };
    let clock = ctx.clock();
    let env = std::sync::Arc::clone(&ctx.env);
    let local_of = || local_runs(&swarm, &env);
    let follow = Follow {
        local: &local_of,
        interval: args.interval,
        log_limit: args.log_limit,
        clock: &clock,
        budgets: &budgets,
        stop: &stop,
        on_state: &on_state,
    };
    // Its document is out: an error from here on is said on stderr only.
    listening.serve(&swarm, loaded, &follow).map_err(|e| {
        match e {
            ServeError::Read(e) => CliError::from(e),
            e => CliError::io(e.to_string()),
        }
        .documented()
    })
}
