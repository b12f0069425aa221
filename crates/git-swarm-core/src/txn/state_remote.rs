//! Where the state ref lives, as the transaction sees it: one trait, [`StateRemote`], with two implementations.
//!
//! * [`InProcess`]: the repository itself, or a remote that is a plain local path. Refs are read and
//!   compare-and-swapped with gix in that repository (`PreviousValue::MustExistAndMatch`), objects copied between it
//!   and this clone in-process. No subprocess at all.
//! * [`GitTransport`]: any URL (`file://`, `git://`, `ssh://`, `https://`). Refs are fetched (gix, or `git fetch`) into
//!   private mirror refs of this clone, which then holds their objects, and updated with `git push --porcelain
//!   --force-with-lease` (see [`crate::remote`]).
//!
//! `txn` (the optimistic loop, landing, the history checks, compaction, doctor's repairs) is written once against
//! the trait; nothing outside this file asks which kind of remote it has, except for what only a repository on
//! this machine has (its lock files, its file events, its checked-out branch): [`StateRemote::reach`].

use std::path::PathBuf;

use gix::ObjectId;

use super::TxnError;
use crate::remote::{self, Endpoint, Publish};
use crate::store::{GitContext, Store};

/// One compare-and-swap of a ref: its name, the value it must have (`None`: must not exist), the new value.
pub(crate) type Update<'a> = (&'a str, Option<ObjectId>, ObjectId);

/// How this process reaches the remote's repository.
#[derive(Debug, Clone, Copy)]
pub enum Reach<'a> {
    /// The repository this clone is (opened a second time, as the remote's store).
    Itself(&'a Store),
    /// Another repository on a local path, read and written in-process.
    Path(&'a Store),
    /// Through git's transports: nothing of it is on this machine as far as we know.
    Transport,
}

/// A remote holding the state ref, seen from the local clone `local` that every method is given.
pub trait StateRemote: std::fmt::Debug {
    /// How it is reached (for what only a repository on this machine has: lock files, file events, a checkout).
    fn reach(&self) -> Reach<'_>;

    /// The name of the remote in this clone's private refs and files (`refs/swarm-remotes/<key>/…`,
    /// `.git/swarm/seen/<key>/…`).
    fn key(&self) -> &str;

    /// The store in which objects of the remote are read once fetched: the remote's repository in-process, this
    /// clone over a transport.
    fn objects<'a>(&'a self, local: &'a Store) -> &'a Store;

    /// Where `refs` are on the remote, in one round trip; each is `(remote ref, its private mirror in local)`. Over
    /// a transport their objects come into `local` and the mirrors are set; in-process the refs are only read.
    fn fetch(&self, local: &Store, refs: &[(&str, &str)]) -> Result<Vec<Option<ObjectId>>, TxnError>;

    /// Make the objects reachable from `tip`, fetched, readable in `local` too (code to rebase in this clone).
    fn bring(&self, local: &Store, tip: ObjectId) -> Result<(), TxnError>;

    /// Has any of these refs surely moved from the value given? Only an in-process remote can tell without trying
    /// the update (and spares the objects a lost attempt would write); over a transport: `false`.
    fn moved(&self, refs: &[(&str, ObjectId)]) -> Result<bool, TxnError>;

    /// Compare-and-swap every update at once, all or none, the objects of `carry` (new code, in `local`) brought
    /// to the remote first.
    fn update(
        &self,
        local: &Store,
        updates: &[Update<'_>],
        carry: Option<ObjectId>,
        why: &str,
    ) -> Result<Publish, TxnError>;

    /// Point `refname` at `new` (in `local`) whatever it was: refs outside the protocol (kept work).
    fn force(&self, local: &Store, refname: &str, new: ObjectId, why: &str) -> Result<Publish, TxnError>;

    /// Delete refs outside the protocol (kept work of landed tasks).
    fn delete(&self, local: &Store, refnames: &[String]) -> Result<(), TxnError>;

    /// The refs of the remote under `prefix`, name and commit (in no particular order).
    fn list(&self, local: &Store, prefix: &str) -> Result<Vec<(String, ObjectId)>, TxnError>;

    /// Point a private mirror of this clone at `id` after an update that moved the remote's ref there (best
    /// effort: mirrors are caches). Nothing in-process, where there are no mirrors.
    fn remember(&self, local: &Store, mirror: &str, id: ObjectId);

    /// The record of the state ref's tip this clone saw last (`mirror`: the state ref's mirror), and its upkeep.
    fn seen(&self, local: &Store, mirror: &str, swarm: &str) -> Result<Option<ObjectId>, TxnError>;
    fn set_seen(&self, local: &Store, mirror: &str, swarm: &str, id: ObjectId);
    fn forget_seen(&self, local: &Store, mirror: &str, swarm: &str) -> Result<(), TxnError>;
}

/// The repository itself or a repository on a local path, read and written with gix in this process.
#[derive(Debug)]
pub(crate) struct InProcess {
    store: Store,
    /// The remote's key; `None` for the repository itself.
    key: Option<String>,
}

impl InProcess {
    /// The repository itself as the remote (`store`: it, opened again).
    pub(crate) fn itself(store: Store) -> InProcess {
        InProcess { store, key: None }
    }

    /// The repository at a local path as the remote named `key`.
    pub(crate) fn path(store: Store, key: String) -> InProcess {
        InProcess { store, key: Some(key) }
    }

    /// `.git/swarm/seen/<key>/<swarm>` of the local clone.
    fn seen_file(&self, local: &Store, swarm: &str) -> PathBuf {
        local.repo.common_dir().join("swarm").join("seen").join(self.key()).join(swarm)
    }
}

impl StateRemote for InProcess {
    fn reach(&self) -> Reach<'_> {
        match self.key {
            None => Reach::Itself(&self.store),
            Some(_) => Reach::Path(&self.store),
        }
    }

    fn key(&self) -> &str {
        self.key.as_deref().unwrap_or("self")
    }

    fn objects<'a>(&'a self, _local: &'a Store) -> &'a Store {
        &self.store
    }

    fn fetch(&self, _local: &Store, refs: &[(&str, &str)]) -> Result<Vec<Option<ObjectId>>, TxnError> {
        Ok(refs.iter().map(|(name, _)| self.store.read_ref(name)).collect::<Result<_, _>>()?)
    }

    fn bring(&self, local: &Store, tip: ObjectId) -> Result<(), TxnError> {
        if self.key.is_some() {
            self.store.copy_reachable(local, tip)?;
        }
        Ok(())
    }

    fn moved(&self, refs: &[(&str, ObjectId)]) -> Result<bool, TxnError> {
        for (name, at) in refs {
            if self.store.read_ref(name)? != Some(*at) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn update(
        &self,
        local: &Store,
        updates: &[Update<'_>],
        carry: Option<ObjectId>,
        why: &str,
    ) -> Result<Publish, TxnError> {
        if let (Some(code), Some(_)) = (carry, &self.key) {
            local.copy_reachable(&self.store, code)?;
        }
        if self.store.cas_refs(updates, why)? {
            return Ok(Publish::Done);
        }
        let lock = updates
            .iter()
            .map(|(name, ..)| self.store.repo.common_dir().join(format!("{name}.lock")))
            .find(|lock| lock.exists());
        Ok(Publish::LostRace(match lock {
            Some(lock) => format!(
                "{} exists (another writer, or one that died; remove it if no git process runs)",
                lock.display()
            ),
            None if updates.len() == 1 => "the ref moved".into(),
            None => "a ref moved".into(),
        }))
    }

    fn force(&self, local: &Store, refname: &str, new: ObjectId, why: &str) -> Result<Publish, TxnError> {
        if self.key.is_some() {
            local.copy_reachable(&self.store, new)?;
        }
        self.store.set_ref(refname, new, why)?;
        Ok(Publish::Done)
    }

    fn delete(&self, _local: &Store, refnames: &[String]) -> Result<(), TxnError> {
        for r in refnames {
            self.store.delete_ref(r)?;
        }
        Ok(())
    }

    fn list(&self, _local: &Store, prefix: &str) -> Result<Vec<(String, ObjectId)>, TxnError> {
        let platform = self.store.repo.references().git(|| "cannot list refs".into())?;
        let iter = platform.prefixed(prefix).git(|| format!("cannot list {prefix}"))?;
        let mut v = Vec::new();
        for r in iter {
            let Ok(mut r) = r else { continue };
            if let Ok(id) = r.peel_to_id() {
                v.push((r.name().as_bstr().to_string(), id.detach()));
            }
        }
        Ok(v)
    }

    fn remember(&self, _local: &Store, _mirror: &str, _id: ObjectId) {}

    fn seen(&self, local: &Store, _mirror: &str, swarm: &str) -> Result<Option<ObjectId>, TxnError> {
        Ok(std::fs::read_to_string(self.seen_file(local, swarm))
            .ok()
            .and_then(|s| ObjectId::from_hex(s.trim().as_bytes()).ok()))
    }

    fn set_seen(&self, local: &Store, _mirror: &str, swarm: &str, id: ObjectId) {
        let file = self.seen_file(local, swarm);
        if std::fs::read_to_string(&file).is_ok_and(|s| id.to_hex() == s.trim()) {
            return;
        }
        let Some(dir) = file.parent() else { return };
        // Written aside and renamed: a reader never sees half a record.
        let _ = std::fs::create_dir_all(dir).and_then(|()| {
            let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
            std::io::Write::write_all(&mut tmp, format!("{id}\n").as_bytes())?;
            tmp.persist(&file).map(drop).map_err(|e| e.error)
        });
    }

    fn forget_seen(&self, local: &Store, _mirror: &str, swarm: &str) -> Result<(), TxnError> {
        let _ = std::fs::remove_file(self.seen_file(local, swarm));
        Ok(())
    }
}

/// A URL remote: fetched into private mirrors of this clone, updated with `git push`.
#[derive(Debug)]
pub(crate) struct GitTransport {
    endpoint: Endpoint,
}

impl GitTransport {
    pub(crate) fn new(endpoint: Endpoint) -> GitTransport {
        GitTransport { endpoint }
    }
}

impl StateRemote for GitTransport {
    fn reach(&self) -> Reach<'_> {
        Reach::Transport
    }

    fn key(&self) -> &str {
        &self.endpoint.mirror_key
    }

    fn objects<'a>(&'a self, local: &'a Store) -> &'a Store {
        local
    }

    fn fetch(&self, local: &Store, refs: &[(&str, &str)]) -> Result<Vec<Option<ObjectId>>, TxnError> {
        let ep = &self.endpoint;
        let tips = remote::fetch_many(local, &ep.url, &ep.push_to, refs, ep.fetch_with)?;
        // Each fetch that brings something adds a pack.
        local.maybe_gc();
        Ok(tips)
    }

    fn bring(&self, _local: &Store, _tip: ObjectId) -> Result<(), TxnError> {
        Ok(())
    }

    fn moved(&self, _refs: &[(&str, ObjectId)]) -> Result<bool, TxnError> {
        Ok(false)
    }

    fn update(
        &self,
        local: &Store,
        updates: &[Update<'_>],
        _carry: Option<ObjectId>,
        _why: &str,
    ) -> Result<Publish, TxnError> {
        // A push carries every object the remote lacks.
        Ok(remote::push(local, &self.endpoint.push_to, updates)?)
    }

    fn force(&self, local: &Store, refname: &str, new: ObjectId, _why: &str) -> Result<Publish, TxnError> {
        Ok(remote::push_forced(local, &self.endpoint.push_to, refname, new)?)
    }

    fn delete(&self, local: &Store, refnames: &[String]) -> Result<(), TxnError> {
        Ok(remote::push_delete(local, &self.endpoint.push_to, refnames)?)
    }

    fn list(&self, local: &Store, prefix: &str) -> Result<Vec<(String, ObjectId)>, TxnError> {
        Ok(remote::list(local, &self.endpoint.push_to, prefix)?)
    }

    fn remember(&self, local: &Store, mirror: &str, id: ObjectId) {
        local.set_mirror(mirror, id);
    }

    fn seen(&self, local: &Store, mirror: &str, _swarm: &str) -> Result<Option<ObjectId>, TxnError> {
        Ok(local.read_ref(mirror)?)
    }

    fn set_seen(&self, local: &Store, mirror: &str, _swarm: &str, id: ObjectId) {
        local.set_mirror(mirror, id);
    }

    fn forget_seen(&self, local: &Store, mirror: &str, _swarm: &str) -> Result<(), TxnError> {
        if local.read_ref(mirror)?.is_some() {
            local.delete_ref(mirror)?;
        }
        Ok(())
    }
}
