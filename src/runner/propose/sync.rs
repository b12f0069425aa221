//! After the forge merged the request: the swarm's branch takes the base back in with a merge commit (`Swarm-Merged`),
//! once, and goes on.

use super::*;

impl Runner<'_> {
    /// Before a claim: take the protected branch into the swarm's when it moved past it (a merge commit on the
    /// swarm's branch, published with a state op `sync` in one atomic update, as a landing is). At most every
    /// [`SYNC_EVERY`] per process, and right after a request was merged. A merge that conflicts is said once per
    /// base commit and left for a person (the request then shows the conflict).
    ///
    /// A request the forge squashed or rebased leaves the base without the swarm's commits, only their content: the
    /// merge then takes the commit the forge merged as its merge base (what the base has beyond it is others' work,
    /// what the swarm's branch has beyond it is work landed since), so later edits of the same lines do not conflict
    /// with their own squashed past, and the merge says `Swarm-Merged: <commit>` so that later requests list only
    /// the tasks landed after it.
    pub(crate) fn sync_target(&mut self, config: &Config) -> Result<(), super::super::RunError> {
        let Some(s) = self.forge(config) else { return Ok(()) };
        let due = with_known(|k| k.last_sync.is_none_or(|t| t.elapsed() >= SYNC_EVERY));
        if !due {
            return Ok(());
        }
        with_known(|k| k.last_sync = Some(Instant::now()));
        let target = format!("refs/heads/{}", config.target);
        let Some(base) = self.swarm.fetch_branch(&format!("refs/heads/{}", s.base))? else { return Ok(()) };
        let Some(tip) = self.swarm.fetch_branch(&target)? else { return Ok(()) };
        let common = self.common_dir();
        if git::is_ancestor(&common, base, tip) || with_known(|k| k.conflicted == Some(base)) {
            return Ok(());
        }
        // The commit the forge merged last, when it is not in the base (a squash or a rebase): from this process's
        // last look at the request, else one look at the forge (which the next update uses too).
        let merged = with_known(|k| k.merged_head.take()).or_else(|| {
            let client = Client::open(self, &s).ok()?;
            let seen = look(&client, &config.target, &s.base, Some(base)).ok()?;
            seen.iter().find(|r| r.merged).and_then(|r| r.head)
        });
        let squashed = merged.filter(|h| {
            git::is_ancestor(&common, *h, tip)
                && !git::is_ancestor(&common, *h, base)
                && last_merged_on(&common, tip).is_none_or(|m| m != *h && git::is_ancestor(&common, m, *h))
        });
        let mut message = format!("git swarm: take {} into {}", s.base, config.target);
        if let Some(h) = squashed {
            message.push_str(&format!("\n\n{MERGED_TRAILER}: {h}\n"));
        }
        let ident = self.commit_ident.clone();
        let mut made: Option<(ObjectId, ObjectId)> = None;
        let mut prepare = |at: ObjectId| -> Result<ObjectId, String> {
            if let Some((on, m)) = made
                && on == at
            {
                return Ok(m);
            }
            if git::is_ancestor(&common, base, at) {
                return Err(TAKEN.into());
            }
            let m = merge_commit(&common, &ident, at, base, squashed, &message)?;
            made = Some((at, m));
            Ok(m)
        };
        let agent = self.agent.clone();
        let summary = format!("sync {} with {} at {}", config.target, s.base, crate::short(&base.to_string()));
        let res =
            self.swarm.land(&self.retry, &self.who, self.clock, &target, &mut prepare, |_snap, _now, _code| {
                Ok((Change { op: "sync", agent: agent.clone(), summary: summary.clone(), ..Default::default() }, ()))
            })?;
        match res {
            Ok(_) => self.emit(Event::Forge(format!(
                "took {} into {}{}",
                s.base,
                config.target,
                if squashed.is_some() {
                    " (the request was squashed or rebased: merged past its own commits)"
                } else {
                    ""
                }
            ))),
            Err(why) if why == TAKEN => {}
            Err(why) => {
                with_known(|k| k.conflicted = Some(base));
                self.emit(Event::Warning(format!(
                    "{} cannot be taken into {} ({why}): a person merges {} into {}; the request shows it",
                    s.base, config.target, s.base, config.target
                )));
            }
        }
        Ok(())
    }
}

/// What `prepare` says when another runner took the base in first.
pub(crate) const TAKEN: &str = "taken in already";

/// The trailer of a merge that took in a request the forge squashed or rebased: the commit it merged.
pub(crate) const MERGED_TRAILER: &str = "Swarm-Merged";

/// A merge commit of `base` into `tip` (or `base` itself when `tip` is behind it), made without a work tree
/// (`git merge-tree --write-tree`, `git commit-tree`); with `merge_base`, that commit is the merge's base.
pub(crate) fn merge_commit(
    common: &std::path::Path,
    ident: &[(String, String)],
    tip: ObjectId,
    base: ObjectId,
    merge_base: Option<ObjectId>,
    message: &str,
) -> Result<ObjectId, String> {
    if git::is_ancestor(common, tip, base) && merge_base.is_none() {
        return Ok(base);
    }
    let (tip_s, base_s) = (tip.to_string(), base.to_string());
    let mb = merge_base.map(|m| format!("--merge-base={m}"));
    let mut args = vec!["merge-tree", "--write-tree", "--name-only", "--no-messages"];
    if let Some(mb) = &mb {
        args.push(mb);
    }
    args.extend([tip_s.as_str(), base_s.as_str()]);
    let out = git::output(common, &args).map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let tree = lines.next().unwrap_or_default().trim().to_string();
    match out.status.code() {
        Some(0) => {}
        Some(1) => {
            let files: Vec<&str> = lines.filter(|l| !l.is_empty()).take(10).collect();
            return Err(format!("conflict in {}", crate::escape::line(&files.join(", "))));
        }
        _ => return Err(format!("git merge-tree: {}", String::from_utf8_lossy(&out.stderr).trim())),
    }
    let mut cmd = git::git_in(common);
    cmd.args(["commit-tree", &tree, "-p", &tip_s, "-p", &base_s, "-m", message]);
    for (k, v) in ident {
        cmd.env(k, v);
    }
    let made = cmd.output().map_err(|e| e.to_string())?;
    if !made.status.success() {
        return Err(format!("git commit-tree: {}", String::from_utf8_lossy(&made.stderr).trim()));
    }
    String::from_utf8_lossy(&made.stdout).trim().parse().map_err(|_| "git commit-tree said no commit".to_string())
}

/// The commit the last squashed or rebased request merged, as the swarm's branch records it: the
/// `Swarm-Merged` trailer of the newest of its merges that took the base in (merges only, on the first-parent line:
/// an agent's own commit cannot move it).
pub(crate) fn last_merged_on(common: &std::path::Path, tip: ObjectId) -> Option<ObjectId> {
    let format = format!("--format=%(trailers:key={MERGED_TRAILER},valueonly,separator=%x2C)");
    let out = git::run(
        common,
        &["log", "--first-parent", "--merges", "--grep=^git swarm: take ", "-n", "1", &format, &tip.to_string()],
    )
    .ok()?;
    out.trim().split(',').next()?.trim().parse().ok()
}

/// The commits of `tip` that are not proposed yet: in none of `carried` (the base, what the forge merged of an
/// earlier request) nor in what the forge last merged of a squashed or rebased request as the branch records it
/// (all of them when there is none), by id.
pub(crate) fn commits_not_in(
    common: &std::path::Path,
    tip: ObjectId,
    carried: &[Option<ObjectId>],
) -> std::collections::BTreeSet<String> {
    let mut args = vec!["rev-list".to_string(), "--max-count=100000".to_string(), tip.to_string()];
    args.extend(carried.iter().flatten().map(|b| format!("^{b}")));
    args.extend(last_merged_on(common, tip).map(|m| format!("^{m}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    git::run(common, &args)
        .map(|out| out.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect())
        .unwrap_or_default()
}
