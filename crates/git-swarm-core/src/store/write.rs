//! Writing a change as blobs, trees and one commit; copying objects between stores; packing loose objects.

use super::batch::Batch;
use super::*;

impl Store {
    /// Write `change` on top of `base` (or a new root with `config` when there is no base). Returns the commit.
    pub fn write(
        &self,
        base: Option<&Snapshot>,
        config: Option<&Config>,
        change: &Change,
        who: &Identity,
        now: Timestamp,
    ) -> Result<ObjectId, StoreError> {
        let base_tree = match base {
            Some(s) => self
                .repo
                .find_commit(s.commit)
                .and_then(|c| c.tree_id())
                .git(|| format!("cannot read the tree of {}", s.commit))?
                .detach(),
            None => ObjectId::empty_tree(self.repo.object_hash()),
        };
        // gix's own editor checks the name of every entry of every tree it rewrites, so one hostile entry (`.git`,
        // `..`) in `tasks/` would stop every op. The paths we write are built from validated ids; what others put
        // there is carried along untouched (and reported by reads).
        let mut editor = self.repo.edit_tree(base_tree).git(|| "cannot edit the state tree".into())?.detach();
        // Every new object goes into one batch: a big write (20,000 tasks filed at once) becomes one pack.
        let mut batch = Batch::new(self);
        let mut place = |editor: &mut gix::objs::tree::Editor<'_>, path: &str, text: String| {
            let id = batch.put(gix::objs::Kind::Blob, text.into_bytes())?;
            editor.upsert(path.split('/'), EntryKind::Blob, id).git(|| format!("cannot place {path}"))?;
            Ok::<_, StoreError>(())
        };
        if let Some(cfg) = config {
            place(&mut editor, CONFIG_PATH, toml::to_string(cfg).git(|| "cannot write swarm.toml".into())?)?;
            if base.is_none() {
                place(&mut editor, README_PATH, STATE_README.to_string())?;
            }
        }
        for path in &change.removes {
            editor.remove(path.split('/')).git(|| format!("cannot remove {path}"))?;
        }
        if let Some(spend) = &change.spend {
            place(&mut editor, SPEND_PATH, toml::to_string(spend).git(|| "cannot write spend.toml".into())?)?;
        }
        for (path, text) in &change.files {
            place(&mut editor, path, text.clone())?;
        }
        for w in &change.writes {
            let text = toml::to_string(&w.task).git(|| format!("cannot serialize task {}", w.task.id))?;
            place(&mut editor, &w.path, text)?;
        }
        let tree = editor.write(|tree| batch.put_object(tree))?;
        batch.finish()?;
        let parents: Vec<ObjectId> = base.map(|s| s.commit).into_iter().collect();
        self.write_commit(tree, &parents, &commit_message(change), who, now)
    }

    /// A commit of `tree` on `parents` by `who` at `now`.
    pub fn write_commit(
        &self,
        tree: ObjectId,
        parents: &[ObjectId],
        message: &str,
        who: &Identity,
        now: Timestamp,
    ) -> Result<ObjectId, StoreError> {
        let sig = gix::actor::Signature {
            name: who.name.as_str().into(),
            email: who.email.as_str().into(),
            time: gix::date::Time { seconds: now.secs() as i64, offset: 0 },
        };
        let commit = gix::objs::Commit {
            tree,
            parents: parents.iter().copied().collect(),
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: message.into(),
            extra_headers: vec![],
        };
        Ok(self.repo.write_object(&commit).git(|| "cannot write the state commit".into())?.detach())
    }

    /// Copy `tip` and every object it reaches that `to` lacks (commits, trees, blobs) from this object database into
    /// `to`, in-process: how code moves between a clone and a remote on a local path without `git fetch`/`git push`.
    /// Stops at every object `to` has already (a repository that has a commit has its history). Returns how many
    /// objects were copied.
    pub(crate) fn copy_reachable(&self, to: &Store, tip: ObjectId) -> Result<usize, StoreError> {
        let hash = self.repo.object_hash();
        // Depth first, each object written only after everything it points to: a copy cut short leaves no object
        // in `to` whose children are missing (a later copy stops at objects `to` has, and would trust it). Many
        // objects go into one pack, which appears whole or not at all.
        let mut batch = Batch::new(to);
        let mut stack = vec![(tip, false)];
        let mut seen = std::collections::HashSet::new();
        let mut copied = 0;
        while let Some((id, children_done)) = stack.pop() {
            if children_done {
                let obj = self.repo.find_object(id).git(|| format!("cannot read object {id}"))?;
                let written = batch.put(obj.kind, obj.detach().data)?;
                if written != id {
                    return Err(StoreError::Git {
                        context: format!("copying object {id}"),
                        message: format!("it was written as {written}"),
                    });
                }
                copied += 1;
                continue;
            }
            if !seen.insert(id) || to.repo.has_object(id) {
                continue;
            }
            stack.push((id, true));
            let obj = self.repo.find_object(id).git(|| format!("cannot read object {id}"))?;
            match obj.kind {
                gix::objs::Kind::Commit => {
                    let c = gix::objs::CommitRef::from_bytes(&obj.data, hash)
                        .git(|| format!("cannot decode commit {id}"))?;
                    stack.push((c.tree(), false));
                    stack.extend(c.parents().map(|p| (p, false)));
                }
                gix::objs::Kind::Tree => {
                    let t =
                        gix::objs::TreeRef::from_bytes(&obj.data, hash).git(|| format!("cannot decode tree {id}"))?;
                    // Submodule entries name commits of another repository: not ours to copy.
                    stack.extend(t.entries.iter().filter(|e| !e.mode.is_commit()).map(|e| (e.oid.to_owned(), false)));
                }
                gix::objs::Kind::Tag => {
                    let t = gix::objs::TagRef::from_bytes(&obj.data, hash).git(|| format!("cannot decode tag {id}"))?;
                    stack.push((t.target(), false));
                }
                gix::objs::Kind::Blob => {}
            }
        }
        batch.finish()?;
        Ok(copied)
    }

    /// Every op adds a few loose objects (and every fetch a small pack); reading thousands of them costs far more
    /// than reading one pack. When git's own thresholds are passed (about 6,700 loose objects, estimated from
    /// `objects/17` as git does, or 50 packs), run `git gc --auto`, which packs in the background. `git push` to a
    /// remote does the same through `receive.autogc`; this covers the objects we write in-process.
    pub(crate) fn maybe_gc(&self) {
        let objects = self.repo.common_dir().join("objects");
        let count = |dir: std::path::PathBuf, ext: Option<&str>| -> usize {
            std::fs::read_dir(dir)
                .map(|rd| {
                    rd.filter_map(Result::ok)
                        .filter(|e| ext.is_none_or(|x| e.path().extension().is_some_and(|got| got == x)))
                        .count()
                })
                .unwrap_or(0)
        };
        let loose_estimate = count(objects.join("17"), None) * 256;
        let packs = count(objects.join("pack"), Some("pack"));
        if loose_estimate > 6700 || packs > 50 {
            // Through the crate's git builder: no hooks (`pre-auto-gc` is one an agent could plant).
            let _ = crate::gitcmd::local(self.repo.common_dir())
                .arg("--git-dir")
                .arg(self.repo.common_dir())
                .args(["gc", "--auto", "--quiet"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// An update that failed writing (not a mismatch, not a lock): a reflog, a full disk.
pub(super) fn is_write_error(message: &str) -> bool {
    ["reflog", "No space left", "Operation not permitted", "Read-only file system", "Input/output error"]
        .iter()
        .any(|m| message.contains(m))
}

/// The commit message of an op: a subject and trailers that `git log` and `git swarm log` read back.
pub(crate) fn commit_message(change: &Change) -> String {
    let mut m = format!("{}\n\nSwarm-Op: {}\n", change.summary, change.op);
    if let Some(t) = &change.task {
        m.push_str(&format!("Swarm-Task: {t}\n"));
    }
    m.push_str(&format!("Swarm-Agent: {}\n", change.agent));
    if let Some(w) = change.writer.as_ref().filter(|w| **w != change.agent) {
        m.push_str(&format!("Swarm-Writer: {w}\n"));
    }
    if let Some(e) = change.epoch {
        m.push_str(&format!("Swarm-Epoch: {e}\n"));
    }
    for more in &change.also {
        m.push_str(&format!("Swarm-Op: {}\n", more.op));
        if let Some(t) = &more.task {
            m.push_str(&format!("Swarm-Task: {t}\n"));
        }
        if let Some(a) = &more.agent {
            m.push_str(&format!("Swarm-Agent: {a}\n"));
        }
        if let Some(e) = more.epoch {
            m.push_str(&format!("Swarm-Epoch: {e}\n"));
        }
    }
    m
}

pub(super) const STATE_README: &str = "\
This tree is the task board of a git swarm (https://crates.io/crates/git-swarm).
It lives in a ref under refs/swarm/ and is never checked out: edit it with `git swarm`, which changes it only by
compare-and-swap. swarm.toml holds the settings; every tasks/**/<id>.toml is one task; each commit is one op.
";
