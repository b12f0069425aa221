//! Waiting for the state ref to move: file events on a local remote's refs (`notify`), polling with backoff between
//! [`MIN_POLL`] and [`MAX_POLL`], a sleep that a stop ends.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(crate) const MIN_POLL: Duration = Duration::from_millis(200);
/// How old a tip another agent of the same process fetched may be for a read (`Runner::read`, the target's tip
/// before a work tree is made): agents that start or finish together share one fetch.
pub(crate) const SHARED_READ: Duration = Duration::from_millis(250);

pub(crate) const MAX_POLL: Duration = Duration::from_secs(10);

pub(super) fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
    }
}

/// Watch a repository's refs (loose refs under `refs/swarm/` and `packed-refs`) for changes.
pub(crate) fn watch_refs(
    common_dir: &Path,
) -> (Option<notify::RecommendedWatcher>, Option<std::sync::mpsc::Receiver<()>>) {
    use notify::Watcher;
    let (tx, rx) = std::sync::mpsc::channel();
    let Ok(mut w) = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        // inotify reports reads too (a file opened, closed unwritten): only a change can move a ref. Without this
        // filter every reader of the ref woke every waiter, which read the ref and woke the others (and itself):
        // idle runners and `watch` spun on the CPU.
        if let Ok(e) = &res
            && matches!(e.kind, notify::EventKind::Access(_))
        {
            return;
        }
        let _ = tx.send(());
    }) else {
        return (None, None);
    };
    let refs = common_dir.join("refs").join("swarm");
    let ok = w.watch(&refs, notify::RecursiveMode::Recursive).is_ok()
        | w.watch(common_dir, notify::RecursiveMode::NonRecursive).is_ok();
    if ok { (Some(w), Some(rx)) } else { (None, None) }
}
