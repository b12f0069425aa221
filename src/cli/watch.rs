//! `git swarm watch`: a live board in the terminal — counts, who holds what, landings per minute, failures, the
//! cycle and the judge's last verdict — redrawn when the state ref moves. A local-path remote is watched for file
//! events (with a poll at `--interval` as a fallback); a URL remote is fetched every `--interval`.
//!
//! On a terminal each frame replaces the last (and the clocks tick every second); elsewhere (a pipe, a file) each
//! new state is printed once, frames separated by a blank line, with no escape codes. `--once` prints one frame.
//! `--json` prints the board (`docs/json.md`) instead of text: one document per line, one line per new state.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::TxnError;
use crate::board::{Loaded, Options, RefWatch};
use crate::escape::line;

use super::frame;
use super::{CliError, CliResult, Ctx};

#[derive(Debug, clap::Args)]
pub(crate) struct WatchArgs {
    /// How often to look at a remote that cannot be watched for file events (a URL), and the fallback poll of one
    /// that can.
    #[arg(long, default_value = "2s", value_parser = parse_interval, value_name = "DURATION")]
    interval: Duration,
    /// Print one frame and exit.
    #[arg(long)]
    once: bool,
    /// Read at most this many ops of the log (landings per minute and the latest ops come from it).
    #[arg(long, default_value_t = 2_000, value_name = "N")]
    log_limit: usize,
}

/// `--interval`: `2s`, `500ms`, `1m`; from 100 ms to an hour.
pub(super) fn parse_interval(s: &str) -> Result<Duration, String> {
    let d =
        humantime::parse_duration(s).map_err(|e| format!("'{}' is not a duration like 2s or 500ms ({e})", line(s)))?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(3600) {
        return Err(format!("'{}' is not between 100ms and 1h", line(s)));
    }
    Ok(d)
}

/// Hides the cursor while the board is drawn on a terminal; shows it again however the command ends.
struct Cursor(bool);

impl Cursor {
    fn hide(tty: bool) -> Cursor {
        if tty {
            let _ = write!(std::io::stdout(), "\x1b[?25l");
        }
        Cursor(tty)
    }
}

impl Drop for Cursor {
    fn drop(&mut self) {
        if self.0 {
            let mut out = std::io::stdout();
            let _ = write!(out, "\x1b[?25h");
            let _ = out.flush();
        }
    }
}

pub(super) fn run(ctx: &mut Ctx, args: WatchArgs) -> CliResult<()> {
    if args.log_limit == 0 {
        return Err(CliError::usage("--log-limit: at least 1"));
    }
    let json = ctx.out.json;
    let stop = if args.once { None } else { Some(super::run::stop_flag()) };
    let swarm = ctx.swarm()?;
    let opts = Options::default();
    let tty = !json && !args.once && std::io::stdout().is_terminal();
    let watch = RefWatch::new(&swarm);
    let _cursor = Cursor::hide(tty);
    // The first read fails the command (no swarm, no remote); later ones are shown and retried.
    let mut loaded = Loaded::read(&swarm, true, args.log_limit)?;
    ctx.out.problems(&loaded.snapshot.problems);
    let mut error: Option<String> = None;
    let mut drawn_at: Option<Instant> = None;
    let mut dirty = true;
    let mut first = true;
    let mut last_poll = Instant::now();
    loop {
        if dirty || (tty && drawn_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1))) {
            let view = loaded.view(&swarm, ctx.now(), &opts, &super::board::local_runs(&swarm, &ctx.env));
            let mut out = std::io::stdout().lock();
            let res = if json {
                serde_json::to_string(&view).map_err(std::io::Error::other).and_then(|s| writeln!(out, "{s}"))
            } else {
                let head = frame::head("watch", &swarm, &view);
                let mut text = frame::render(&view, &head, None);
                if let Some(e) = &error {
                    text.push_str(&format!("\ncannot read the board now (showing the last state): {}\n", line(e)));
                }
                if tty {
                    // Clear the screen once; then go home and overwrite, clearing the rest of each line and what
                    // the last frame left below (no flicker).
                    let clear = if first { "\x1b[2J" } else { "" };
                    let body = text.replace('\n', "\x1b[K\n");
                    write!(out, "\x1b[H{clear}{body}\x1b[J")
                } else if first {
                    write!(out, "{text}")
                } else {
                    write!(out, "\n{text}")
                }
            };
            // A closed stdout (`| head`) ends the watch quietly.
            if res.and_then(|_| out.flush()).is_err() {
                return Ok(());
            }
            drawn_at = Some(Instant::now());
            dirty = false;
            first = false;
        }
        if args.once || stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
            return Ok(());
        }
        // Wait for a file event, the next poll, or the next tick of the clock.
        let tick = if tty { Duration::from_secs(1) } else { args.interval };
        let until_poll = args.interval.saturating_sub(last_poll.elapsed());
        let nap = tick.min(until_poll).min(Duration::from_millis(250)).max(Duration::from_millis(10));
        let event = watch.wait(nap);
        if !event && last_poll.elapsed() < args.interval {
            continue;
        }
        last_poll = Instant::now();
        match swarm.tip() {
            Ok(Some(tip)) if tip != loaded.snapshot.commit => match swarm
                .store()
                .read(tip, true)
                .map_err(TxnError::from)
                .and_then(|snap| Loaded::at(&swarm, snap, args.log_limit))
            {
                Ok(l) => {
                    loaded = l;
                    error = None;
                    dirty = true;
                }
                Err(e) => {
                    dirty |= error.replace(e.to_string()).is_none();
                }
            },
            Ok(Some(_)) => dirty |= error.take().is_some(),
            Ok(None) => dirty |= error.replace("the state ref is gone".into()).is_none(),
            Err(e) => dirty |= error.replace(e.to_string()).is_none(),
        }
    }
}
