//! The commit this binary is built from, for `git swarm ci github`: the generated workflow installs git-swarm on
//! the runners from that exact commit (`cargo install --git <repository> --rev <commit>`).
//!
//! * `GIT_SWARM_COMMIT`: the 40 hex digits of `git rev-parse HEAD` of the source tree, or empty when the source is
//!   not a git work tree of its own (a crate from crates.io, a tarball; a repository above it does not count). A
//!   package that `cargo package` made records its commit in `.cargo_vcs_info.json`, which is read then.
//! * `GIT_SWARM_COMMIT_DIRTY`: `1` when tracked files differ from that commit (uncommitted changes), else `0`.
//! * `GIT_SWARM_PACKAGED`: `1` when built from a package (`.cargo_vcs_info.json` is there: crates.io), else `0`.
//!
//! `cargo install --git` builds in a git checkout of the commit, so a binary installed that way knows it too.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commit of a packaged crate: `{"git": {"sha1": "…", "dirty": true}, …}` (cargo's own format, flat enough to
/// read without a JSON parser).
fn packaged(text: &str) -> (String, bool) {
    let sha = text
        .split("\"sha1\"")
        .nth(1)
        .and_then(|rest| rest.split('"').nth(1))
        .filter(|s| is_commit(s))
        .unwrap_or_default()
        .to_ascii_lowercase();
    let dirty =
        text.split("\"dirty\"").nth(1).is_some_and(|rest| rest.trim_start_matches([' ', ':']).starts_with("true"));
    (sha, dirty)
}

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    // What the binary embeds of its sources changes the dirty flag: look again when any of it changes.
    for p in ["build.rs", "Cargo.toml", "Cargo.lock", "src", "prompts", "hooks"] {
        if dir.join(p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let (mut commit, mut dirty, mut from_package) = (String::new(), false, false);
    let vcs_info = dir.join(".cargo_vcs_info.json");
    if let Ok(text) = std::fs::read_to_string(&vcs_info) {
        println!("cargo:rerun-if-changed=.cargo_vcs_info.json");
        (commit, dirty) = packaged(&text);
        from_package = true;
    } else if let Some(top) = git(&dir, &["rev-parse", "--show-toplevel"]) {
        // Only a repository whose work tree is this source tree: a crate unpacked inside somebody's repository
        // (a home directory under git) is not built from that repository's HEAD.
        let same = std::fs::canonicalize(&top).ok() == std::fs::canonicalize(&dir).ok();
        if same && let Some(head) = git(&dir, &["rev-parse", "--verify", "-q", "HEAD"]).filter(|h| is_commit(h)) {
            commit = head.to_ascii_lowercase();
            dirty = git(&dir, &["status", "--porcelain", "--untracked-files=no"]).is_none_or(|s| !s.is_empty());
            // HEAD, the branch it names (loose or packed) and the index: a commit, a checkout or `git add`.
            let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string(), "index".to_string()];
            if let Some(name) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
                watch.push(name);
            }
            for name in watch {
                if let Some(p) = git(&dir, &["rev-parse", "--path-format=absolute", "--git-path", &name])
                    && Path::new(&p).exists()
                {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
        }
    }
    println!("cargo:rustc-env=GIT_SWARM_COMMIT={commit}");
    println!("cargo:rustc-env=GIT_SWARM_COMMIT_DIRTY={}", u8::from(dirty));
    println!("cargo:rustc-env=GIT_SWARM_PACKAGED={}", u8::from(from_package));
}
