//! The caches a sandboxed run may write, owned by this clone's swarm (docs/agents.md, *Caches*): a sandboxed run's
//! home is fresh and the person's own tool folders are shown read-only (`agent::sandbox::HOME_TOOLS`), so without
//! these a package manager either fails (cargo cannot lock a read-only registry; rustup finds no toolchain under
//! the fresh home) or starts from nothing on every run. Never is the person's own `~/.cargo/registry` or `~/.npm`
//! made writable: an agent could poison sources the person builds later (invariant 36).
//!
//! * `<cache>/caches/cargo` is the run's `CARGO_HOME`: its registry seeded once by copy from the person's
//!   (`registry/index` and `registry/cache`, the downloaded `.crate` files whose checksums cargo checks against
//!   `Cargo.lock`; not `registry/src`, nor credentials, nor `bin`), so that a build works offline and starts warm;
//!   the person's `config.toml` copied too (source replacement, vendoring).
//! * `<cache>/caches/xdg` is `XDG_CACHE_HOME` (pip, uv, Go's build cache, pnpm, Bun); `npm_config_cache`,
//!   `YARN_CACHE_FOLDER`, `npm_config_store_dir` (pnpm's store) and `GOMODCACHE` have folders of their own there.
//! * the person's toolchain roots (`RUSTUP_HOME`, `PYENV_ROOT`, `NVM_DIR`, `VOLTA_HOME`), when the environment
//!   does not name them, are named at their place in the runner's home, or in the home a `PATH` entry is in
//!   (shown read-only): a fresh home has none, and a rustup `cargo` would find no toolchain.
//!
//! The caches are shared by this clone's agents, like a CI runner's: what one run leaves there another run reads
//! (docs/check.md says what a warm check can be trusted for).

use std::path::{Path, PathBuf};

/// The most bytes of the person's cargo registry copied into the swarm's.
const MAX_SEED: u64 = 2 << 30;

/// The variables a sandboxed run gets for its caches and toolchains, and the folder to show writable: `base` is
/// the clone's cache folder ([`super::Places::base`]), `home` the runner's home, `env` the runner's environment,
/// `owner` the uid and gid the run is for when not the runner's (the caches are given to it).
pub(crate) fn environment(
    base: &Path,
    home: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    owner: Option<(u32, u32)>,
) -> (Vec<(String, String)>, PathBuf) {
    let root = root(base);
    let uid = owner.map_or_else(|| nix::unistd::geteuid().as_raw(), |(u, _)| u);
    let person_cargo = env("CARGO_HOME").map(PathBuf::from).or_else(|| home.map(|h| h.join(".cargo")));
    make(base, &root, person_cargo.as_deref(), uid, owner);
    let mut out: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, p: &Path| out.push((k.to_string(), p.to_string_lossy().into_owned()));
    let xdg = root.join("xdg");
    set("CARGO_HOME", &root.join("cargo"));
    set("XDG_CACHE_HOME", &xdg);
    for (k, sub) in XDG_FOLDERS {
        set(k, &xdg.join(sub));
    }
    // Where the toolchains are: the runner's home, else a home a `PATH` entry is in (`/root/.cargo/bin` names
    // `/root`, whose `.rustup` the cargo there needs).
    let mut homes: Vec<PathBuf> = home.map(Path::to_path_buf).into_iter().collect();
    for entry in env("PATH").iter().flat_map(|p| std::env::split_paths(p).collect::<Vec<_>>()) {
        homes.extend(entry.ancestors().skip(1).filter(|a| a.parent().is_some()).map(Path::to_path_buf));
    }
    for (k, rel) in
        [("RUSTUP_HOME", ".rustup"), ("PYENV_ROOT", ".pyenv"), ("NVM_DIR", ".nvm"), ("VOLTA_HOME", ".volta")]
    {
        if env(k).is_some() {
            continue;
        }
        if let Some(p) = homes.iter().map(|h| h.join(rel)).find(|p| p.is_dir()) {
            set(k, &p);
        }
    }
    (out, root)
}

/// The swarm's caches of the clone whose cache folder is `base`.
pub(crate) fn root(base: &Path) -> PathBuf {
    base.join("caches")
}

/// The variables that name a folder of their own in `XDG_CACHE_HOME`.
const XDG_FOLDERS: &[(&str, &str)] = &[
    ("npm_config_cache", "npm"),
    ("YARN_CACHE_FOLDER", "yarn"),
    ("npm_config_store_dir", "pnpm-store"),
    ("GOMODCACHE", "go-mod"),
];

/// Make the caches at `root` when there are none yet (or they belong to another uid than `uid`, the one runs are
/// for): built in a new folder of the runner's in `base` — the registry seeded from `person_cargo`, every folder
/// made, all of it given to `owner` — and renamed into place whole. Once made, the runner writes nothing there:
/// the caches are the agents' to write, and whatever they planted (a link in place of a folder) is never
/// written through.
fn make(base: &Path, root: &Path, person_cargo: Option<&Path>, uid: u32, owner: Option<(u32, u32)>) {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() && m.uid() == uid => return,
        Ok(_) => {
            let _ = crate::agent::files::remove_all(root);
        }
        Err(_) => {}
    }
    let tmp = base.join(format!("caches.new.{}", std::process::id()));
    let _ = crate::agent::files::remove_all(&tmp);
    if std::fs::create_dir_all(&tmp).is_err() {
        return;
    }
    let _ = std::fs::create_dir_all(tmp.join("cargo"));
    for (_, sub) in XDG_FOLDERS {
        let _ = std::fs::create_dir_all(tmp.join("xdg").join(sub));
    }
    if let Some(from) = person_cargo.filter(|p| p.is_dir()) {
        seed_cargo(from, &tmp.join("cargo"));
    }
    if let Some((uid, gid)) = owner
        && let Ok(d) = crate::agent::files::Dir::open(&tmp)
    {
        let _ = d.chown_all(uid, gid);
    }
    // Another runner of the clone may have made them meanwhile: theirs stay.
    if std::fs::rename(&tmp, root).is_err() {
        let _ = crate::agent::files::remove_all(&tmp);
    }
}

/// Copy the person's cargo registry (`from`: their `CARGO_HOME`) into the swarm's new one (`to`): the index and the
/// downloaded crates, and `config.toml`; past [`MAX_SEED`] bytes it stops.
fn seed_cargo(from: &Path, to: &Path) {
    let mut budget = MAX_SEED;
    for rel in ["registry/index", "registry/cache"] {
        copy_tree(&from.join(rel), &to.join(rel), &mut budget);
    }
    for f in ["config.toml", "config"] {
        let src = from.join(f);
        if std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_file() && m.len() < 1 << 20) {
            let _ = std::fs::copy(&src, to.join(f));
        }
    }
}

/// Copy the regular files and folders below `from` (the person's: no link followed) to `to` (a new folder of the
/// runner's), within `budget`.
fn copy_tree(from: &Path, to: &Path, budget: &mut u64) {
    let Ok(entries) = std::fs::read_dir(from) else { return };
    let _ = std::fs::create_dir_all(to);
    for e in entries.flatten() {
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else { continue };
        let dest = to.join(e.file_name());
        if meta.is_dir() {
            copy_tree(&e.path(), &dest, budget);
        } else if meta.is_file() && meta.len() <= *budget && std::fs::copy(e.path(), &dest).is_ok() {
            *budget -= meta.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_copied_never_linked_and_the_toolchains_named_where_they_are() {
        let dir = tempfile::tempdir().expect("tmp");
        let home = dir.path().join("home");
        let person = home.join(".cargo");
        std::fs::create_dir_all(person.join("registry/cache/index.crates.io-x")).expect("mkdir");
        std::fs::create_dir_all(person.join("registry/src/index.crates.io-x/a-1.0")).expect("mkdir");
        std::fs::write(person.join("registry/cache/index.crates.io-x/a-1.0.crate"), b"crate").expect("write");
        std::fs::write(person.join("registry/src/index.crates.io-x/a-1.0/lib.rs"), b"src").expect("write");
        std::fs::write(person.join("credentials.toml"), b"token").expect("write");
        std::os::unix::fs::symlink("/etc/hostname", person.join("registry/cache/link")).expect("link");
        std::fs::create_dir_all(home.join(".rustup")).expect("rustup");
        let base = dir.path().join("base");
        let (vars, root) = environment(&base, Some(&home), &|_| None, None);
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| PathBuf::from(v));
        let cargo = get("CARGO_HOME").expect("CARGO_HOME");
        assert!(cargo.starts_with(&root) && root.starts_with(&base), "{vars:?}");
        let copied = cargo.join("registry/cache/index.crates.io-x/a-1.0.crate");
        assert_eq!(std::fs::read(&copied).expect("copied"), b"crate");
        assert!(!std::fs::symlink_metadata(&copied).expect("meta").file_type().is_symlink());
        // A write to the copy never reaches the person's file.
        std::fs::write(&copied, b"poisoned").expect("write");
        assert_eq!(std::fs::read(person.join("registry/cache/index.crates.io-x/a-1.0.crate")).expect("read"), b"crate");
        assert!(!cargo.join("registry/src").exists(), "extracted sources are not seeded");
        assert!(!cargo.join("credentials.toml").exists(), "no credential is copied");
        assert!(!cargo.join("registry/cache/link").exists(), "no link is copied");
        assert_eq!(get("RUSTUP_HOME"), Some(home.join(".rustup")));
        assert_eq!(get("PYENV_ROOT"), None, "only what exists is named");
        assert!(get("XDG_CACHE_HOME").expect("xdg").starts_with(&root));
        // Made once: what an agent planted there since (a link in place of a folder) is never written through.
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::remove_dir_all(root.join("xdg")).expect("rm");
        std::os::unix::fs::symlink(&outside, root.join("xdg")).expect("plant");
        std::fs::remove_dir_all(root.join("cargo/registry")).expect("rm");
        let _ = environment(&base, Some(&home), &|_| None, None);
        assert_eq!(std::fs::read_dir(&outside).expect("outside").count(), 0, "written through a planted link");
        assert!(!root.join("cargo/registry").exists(), "seeded again into the agents' folder");
        // A toolchain in the home a PATH entry is in (a runner whose HOME is elsewhere).
        let other = dir.path().join("other");
        std::fs::create_dir_all(other.join(".pyenv")).expect("pyenv");
        let path = format!("/usr/bin:{}", other.join(".cargo/bin").display());
        let (vars, _) = environment(&base, Some(&home), &|k| (k == "PATH").then(|| path.clone()), None);
        assert!(vars.contains(&("PYENV_ROOT".into(), other.join(".pyenv").to_string_lossy().into_owned())), "{vars:?}");
        // Named by the runner's environment: left to it.
        let (vars, _) = environment(&base, Some(&home), &|k| (k == "RUSTUP_HOME").then(|| "/opt/rustup".into()), None);
        assert!(!vars.iter().any(|(k, _)| k == "RUSTUP_HOME"), "{vars:?}");
    }
}
