//! The objects of one write, kept in memory until the write is whole: a few go loose, as git writes them; many go
//! into one pack.
//!
//! A loose object is a file, and the kernel's cost of creating one (an inode, a directory entry, its fan-out folder)
//! is far above the cost of hashing and deflating it: `add --file` of 20,000 tasks spent most of its time creating
//! 20,000 files, and then `git gc --auto` spent as much again packing them. One pack is written with two files (the
//! `.pack` and its `.idx`), each made under a temporary name and renamed into place, so a reader sees the whole pack
//! or none of it. Nothing refers to the new objects until the op's compare-and-swap publishes its commit, and the
//! commit itself is written after them (loose, one file): a reader that has the commit has everything under it.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;

use gix::ObjectId;
use gix::objs::Kind;
use gix_pack as pack;

use super::{GitContext, Store, StoreError};

/// At this many objects a write goes into a pack instead of loose files. Below it, loose objects cost less than the
/// index git builds for a pack; git's own threshold for keeping a fetched pack rather than exploding it
/// (`fetch.unpackLimit`) is 100.
pub(crate) const PACK_AT: usize = 100;

/// A batch holding this many bytes of objects is written out (as a pack) before it takes more: copying a big
/// repository's history to a remote on a local path must not hold all of it in memory. Objects are put in the order
/// they are to be written (what an object names before it), so each pack written early holds only objects whose
/// children are in it or in one written before.
const FLUSH_AT_BYTES: usize = 64 << 20;

/// Objects to write into `to`: each hashed when it is put, so that the trees that name it can be built before it is
/// written.
pub(crate) struct Batch<'a> {
    to: &'a Store,
    hash: gix::hash::Kind,
    objects: Vec<(ObjectId, Kind, Vec<u8>)>,
    bytes: usize,
    flush_at: usize,
    seen: HashSet<ObjectId>,
}

impl<'a> Batch<'a> {
    pub(crate) fn new(to: &'a Store) -> Batch<'a> {
        Batch {
            to,
            hash: to.repo.object_hash(),
            objects: Vec::new(),
            bytes: 0,
            flush_at: FLUSH_AT_BYTES,
            seen: HashSet::new(),
        }
    }

    /// Keep `data` as an object of `kind`; its id.
    pub(crate) fn put(&mut self, kind: Kind, data: Vec<u8>) -> Result<ObjectId, StoreError> {
        let id = gix::objs::compute_hash(self.hash, kind, &data).git(|| "cannot hash an object".into())?;
        if self.seen.insert(id) {
            if self.bytes + data.len() > self.flush_at && !self.objects.is_empty() {
                self.write_out()?;
            }
            self.bytes += data.len();
            self.objects.push((id, kind, data));
        }
        Ok(id)
    }

    /// Keep an object already encoded (a tree, a commit); its id.
    pub(crate) fn put_object(&mut self, object: &impl gix::objs::WriteTo) -> Result<ObjectId, StoreError> {
        let mut data = Vec::with_capacity(object.size() as usize);
        object.write_to(&mut data).git(|| "cannot encode an object".into())?;
        self.put(object.kind(), data)
    }

    /// Write every kept object: loose below [`PACK_AT`], else one pack.
    pub(crate) fn finish(mut self) -> Result<(), StoreError> {
        self.write_out()
    }

    fn write_out(&mut self) -> Result<(), StoreError> {
        let objects = std::mem::take(&mut self.objects);
        self.bytes = 0;
        if objects.len() < PACK_AT {
            use gix::objs::Write as _;
            for (id, kind, data) in &objects {
                self.to.repo.objects.write_buf(*kind, data).git(|| format!("cannot write object {id}"))?;
            }
            return Ok(());
        }
        self.pack(&objects)
    }

    fn pack(&self, objects: &[(ObjectId, Kind, Vec<u8>)]) -> Result<(), StoreError> {
        use pack::data::output;
        let context = || "cannot write a pack of new objects".to_string();
        let count = u32::try_from(objects.len()).git(context)?;
        let entries = objects
            .iter()
            .map(|(id, kind, data)| {
                // The fastest level, as git uses for loose objects: these packs are short-lived (`git gc` repacks
                // them with deltas), and deflating is most of the time a pack costs.
                output::Entry::from_data(
                    &output::Count::from_data(*id, None),
                    &gix::objs::Data::new(data, *kind, self.hash),
                    gix::zlib::Compression::BEST_SPEED,
                )
            })
            .collect::<Result<Vec<_>, _>>()
            .git(context)?;
        let mut bytes = Vec::new();
        let mut writer = output::bytes::FromEntriesIter::new(
            std::iter::once(Ok(entries)),
            &mut bytes,
            count,
            pack::data::Version::V2,
            self.hash,
        );
        for step in &mut writer {
            step.git(context)?;
        }
        let dir = self.to.repo.objects.store_ref().path().join("pack");
        let outcome = pack::Bundle::write_to_directory(
            &mut bytes.as_slice(),
            Some(&dir),
            &mut gix::progress::Discard,
            &AtomicBool::new(false),
            None::<gix::objs::find::Never>,
            self.hash,
            pack::bundle::write::Options {
                // One thread: a write is one op among many on a busy machine, and the pack's objects are small.
                thread_limit: Some(1),
                ..Default::default()
            },
        )
        .git(context)?;
        // The `.keep` marks a pack as being written (a fetch keeps it until its refs are set). Ours is whole, and
        // `git gc` must be free to fold it into the next repack; it never drops what is unreachable but recent.
        if let Some(keep) = outcome.keep_path {
            let _ = std::fs::remove_file(keep);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bare() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        gix::init_bare(dir.path()).expect("git init");
        let store = Store::open(dir.path()).expect("open");
        (dir, store)
    }

    /// (loose objects, packs) under the store's objects folder.
    fn files(dir: &std::path::Path) -> (usize, usize) {
        let objects = dir.join("objects");
        let mut loose = 0;
        for fan in std::fs::read_dir(&objects).expect("objects folder").filter_map(Result::ok) {
            let name = fan.file_name().to_string_lossy().into_owned();
            if name.len() == 2 {
                loose += std::fs::read_dir(fan.path()).expect("fan-out folder").count();
            }
        }
        let packs = std::fs::read_dir(objects.join("pack"))
            .expect("pack folder")
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
            .count();
        (loose, packs)
    }

    /// What git itself says of the store: every object whole, every pack with its index.
    fn git_fsck(dir: &std::path::Path) {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(dir)
            .args(["fsck", "--full", "--no-dangling", "--no-progress"])
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git fsck: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn blobs(batch: &mut Batch<'_>, n: usize) -> Vec<ObjectId> {
        (0..n).map(|i| batch.put(Kind::Blob, format!("task {i}\n").into_bytes()).expect("in-memory object")).collect()
    }

    #[test]
    fn a_big_write_is_one_pack_and_a_small_one_is_loose() {
        let (dir, store) = bare();
        let mut batch = Batch::new(&store);
        let ids = blobs(&mut batch, PACK_AT + 50);
        batch.finish().expect("the batch is written");
        assert_eq!(files(dir.path()), (0, 1), "one pack, nothing loose");
        for id in &ids {
            assert!(store.repo.has_object(*id), "{id} is readable from the pack");
        }

        let mut batch = Batch::new(&store);
        let small = (0..3).map(|i| batch.put(Kind::Blob, format!("small {i}").into_bytes()).expect("in-memory object"));
        let small: Vec<_> = small.collect();
        batch.finish().expect("the batch is written");
        assert_eq!(files(dir.path()), (3, 1), "below PACK_AT the objects are loose");
        assert!(small.iter().all(|id| store.repo.has_object(*id)));
        git_fsck(dir.path());
    }

    #[test]
    fn an_object_put_twice_is_written_once() {
        let (dir, store) = bare();
        let mut batch = Batch::new(&store);
        let a = batch.put(Kind::Blob, b"same".to_vec()).expect("in-memory object");
        let b = batch.put(Kind::Blob, b"same".to_vec()).expect("in-memory object");
        assert_eq!(a, b);
        batch.finish().expect("the batch is written");
        assert_eq!(files(dir.path()), (1, 0));
    }

    #[test]
    fn a_batch_past_its_bytes_is_written_in_several_packs_each_whole() {
        let (dir, store) = bare();
        let mut batch = Batch::new(&store);
        batch.flush_at = 2_000;
        // Each blob is about 10 bytes: a flush every ~200 objects, each of them a pack.
        let ids = blobs(&mut batch, 5 * PACK_AT);
        batch.finish().expect("the batch is written");
        let (loose, packs) = files(dir.path());
        assert!(packs >= 2, "the batch was flushed along the way ({packs} packs, {loose} loose)");
        assert!(ids.iter().all(|id| store.repo.has_object(*id)));
        git_fsck(dir.path());
    }

    #[test]
    fn a_tree_put_names_its_blobs_and_reads_back() {
        let (_dir, store) = bare();
        let mut batch = Batch::new(&store);
        let mut tree = gix::objs::Tree::empty();
        for (i, id) in blobs(&mut batch, PACK_AT).into_iter().enumerate() {
            tree.entries.push(gix::objs::tree::Entry {
                mode: gix::objs::tree::EntryKind::Blob.into(),
                filename: format!("{i:04}.toml").into(),
                oid: id,
            });
        }
        let id = batch.put_object(&tree).expect("in-memory object");
        batch.finish().expect("the batch is written");
        let read = store.repo.find_tree(id).expect("the tree is in the pack");
        assert_eq!(read.decode().expect("in-memory object").entries.len(), PACK_AT);
    }
}
