//! Refs of this store: the compare-and-swap of several refs at once, the private mirrors and kept work, stale
//! lock files.

use super::*;

impl Store {
    /// The commit a ref points at, if the ref exists.
    pub fn read_ref(&self, name: &str) -> Result<Option<ObjectId>, StoreError> {
        let r = self.repo.try_find_reference(name).git(|| format!("cannot read {name}"))?;
        match r {
            None => Ok(None),
            Some(mut r) => {
                let id = r.peel_to_id().git(|| format!("cannot resolve {name}"))?;
                Ok(Some(id.detach()))
            }
        }
    }

    /// Move each ref from its expected value (None: must not exist) to its new one, all or none (a gix transaction
    /// locks them all before it changes any). `Ok(false)` when a ref was not where expected (a lost race) or its
    /// lock was held by another writer at that moment.
    pub(crate) fn cas_refs(
        &self,
        updates: &[(&str, Option<ObjectId>, ObjectId)],
        why: &str,
    ) -> Result<bool, StoreError> {
        let edits = updates
            .iter()
            .map(|(name, expected, new)| {
                Ok(RefEdit {
                    change: RefChange::Update {
                        log: LogChange { mode: RefLog::AndReference, force_create_reflog: false, message: why.into() },
                        expected: match expected {
                            Some(id) => PreviousValue::MustExistAndMatch(gix::refs::Target::Object(*id)),
                            None => PreviousValue::MustNotExist,
                        },
                        new: gix::refs::Target::Object(*new),
                    },
                    name: (*name).try_into().git(|| format!("bad ref name {name}"))?,
                    deref: false,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        match self.repo.edit_references(edits) {
            Ok(_) => Ok(true),
            Err(e) => {
                // A mismatch or a held lock is a lost race; anything else is a real error. Tell them apart by
                // looking again: a ref moved, or its lock file is there.
                for (name, expected, _) in updates {
                    let now = self.read_ref(name)?;
                    let lock = self.repo.common_dir().join(format!("{name}.lock"));
                    if now != *expected || lock.exists() || is_lock_error(&e.to_string()) {
                        return Ok(false);
                    }
                }
                // A write that failed on the way (a reflog on a full or broken disk) may pass on the next try, as a
                // remote's "failed to update ref" does: a refusal, which the loop retries (and gives up on, as
                // stuck, when it keeps coming while the ref stands still).
                if is_write_error(&e.to_string()) {
                    return Ok(false);
                }
                let names: Vec<&str> = updates.iter().map(|u| u.0).collect();
                Err(StoreError::Git {
                    context: format!("cannot update {}", names.join(" and ")),
                    message: e.to_string(),
                })
            }
        }
    }

    /// Point `name` at `new` whatever it was (for the local mirror of a remote's state ref).
    pub fn set_ref(&self, name: &str, new: ObjectId, why: &str) -> Result<(), StoreError> {
        let edit = RefEdit {
            change: RefChange::Update {
                log: LogChange { mode: RefLog::AndReference, force_create_reflog: false, message: why.into() },
                expected: PreviousValue::Any,
                new: gix::refs::Target::Object(new),
            },
            name: name.try_into().git(|| format!("bad ref name {name}"))?,
            deref: false,
        };
        self.repo.edit_reference(edit).git(|| format!("cannot update {name}"))?;
        Ok(())
    }

    /// Delete the ref `name` (a private mirror of this clone).
    pub(crate) fn delete_ref(&self, name: &str) -> Result<(), StoreError> {
        let edit = RefEdit {
            change: RefChange::Delete { expected: PreviousValue::Any, log: RefLog::AndReference },
            name: name.try_into().git(|| format!("bad ref name {name}"))?,
            deref: false,
        };
        self.repo.edit_reference(edit).git(|| format!("cannot delete {name}"))?;
        Ok(())
    }

    /// Point the private mirror ref at `new`, best effort: it is a cache (objects anchor, negotiation hint). A lock
    /// left on it by a killed process is cleared once it is clearly stale.
    pub(crate) fn set_mirror(&self, name: &str, new: ObjectId) {
        // Mostly it is there already (our own push set it, or nothing changed): no write, no reflog line.
        if self.read_ref(name).ok().flatten() == Some(new) {
            return;
        }
        self.clear_stale_lock(name);
        let _ = self.set_ref(name, new, "git swarm: mirror");
    }

    /// Remove `<name>.lock` if it is older than a live writer ever holds one. Only for refs that nothing but
    /// git-swarm writes and that are caches (the mirror), never for the state ref itself.
    pub(crate) fn clear_stale_lock(&self, name: &str) {
        remove_if_stale(&self.repo.common_dir().join(format!("{name}.lock")));
    }

    /// `Store::clear_stale_lock` for every ref of this clone's private records (`PRIVATE_REFS`: the mirrors and
    /// what the clone saw of the target), whether or not anything writes that ref again: a runner SIGKILLed while it
    /// set one leaves the lock, and git never removes it. Returns how many were removed.
    pub fn clear_stale_private_locks(&self) -> usize {
        fn walk(dir: &std::path::Path, removed: &mut usize) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for e in entries.flatten() {
                let path = e.path();
                match e.file_type() {
                    Ok(t) if t.is_dir() => walk(&path, removed),
                    Ok(t) if t.is_file() && path.extension().is_some_and(|x| x == "lock") => {
                        *removed += usize::from(remove_if_stale(&path));
                    }
                    _ => {}
                }
            }
        }
        let mut removed = 0;
        for prefix in PRIVATE_REFS {
            walk(&self.repo.common_dir().join(prefix), &mut removed);
        }
        removed
    }
}

pub(super) fn is_lock_error(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("lock") || m.contains("must exist") || m.contains("did not match") || m.contains("already exist")
}

/// The refs of a clone that only git-swarm writes and whose locks a live writer holds for milliseconds: the mirrors
/// of the state ref and of branches, and the record of the target's tip the clone accepted.
pub(super) const PRIVATE_REFS: [&str; 3] = ["refs/swarm-remotes", "refs/swarm-branches", "refs/swarm-seen"];

/// Remove the lock file `lock` if it is older than a live writer ever holds one (10 s); `true` when removed.
pub(super) fn remove_if_stale(lock: &std::path::Path) -> bool {
    let stale = std::fs::metadata(lock)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > std::time::Duration::from_secs(10)));
    stale && std::fs::remove_file(lock).is_ok()
}
