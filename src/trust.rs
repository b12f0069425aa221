//! What a clone trusts its runners to run (security.md S1, S2, S4).
//!
//! `refs/swarm/<name>` is not protected the way a branch is: whoever can push it can set the command every runner
//! executes (`[roles.*] exec`, a preset), a check (`[run] check`), a setup (`[run] setup`), an `http` endpoint and
//! the variable whose value goes there, the prompts (`prompts/*.md`), the branch agents' code lands on. So a runner
//! runs only settings its clone trusts: the [`Document`] of those settings — one line each, in a fixed order — has
//! a SHA-256 digest, and the clone records the digests it trusts in its git config (`swarm.trusted`, one entry
//! each). `git swarm trust` shows the document and records it; `init --config` and `config set` record what they
//! write; a workflow file pins its digest in `GIT_SWARM_TRUST` (the file is under branch protection, the state ref
//! is not). What is local (`--exec`, `--check`, `git config swarm.*`) needs no trust.

use gix::ObjectId;

use crate::model::Config;

/// The git config key of this clone's trusted digests.
pub(crate) const TRUST_KEY: &str = "swarm.trusted";

/// The settings of a state ref that choose what runners run, as text, and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Document {
    /// `key = value` lines, sorted: `target`, `run.check`, every `roles.<role>.<key>`, `prompts/<file>` (its blob).
    pub lines: Vec<String>,
    /// SHA-256 of the lines (each ending in `\n`), hex.
    pub digest: String,
}

impl Document {
    /// The document of `config` (the state ref's `swarm.toml`) and the prompt overrides at the same commit (`prompts/`
    /// file name → blob id).
    pub(crate) fn of(config: &Config, prompts: &[(String, ObjectId)]) -> Document {
        let mut lines = vec![format!("target = {}", toml::Value::String(config.target.clone()))];
        if let Some(run) = config.extra.get("run").and_then(|r| r.as_table()) {
            // What decides whether code lands, beside the check itself (each only when set: the digest of settings
            // that do not use them stays what it was).
            // And what an agent may reach (its sandbox, its network, paths it may read or write), and where what
            // looks like a secret may land.
            for key in [
                "check",
                "check_baseline",
                "check_report",
                "check_clean",
                "check_policy",
                "setup",
                "setup_when",
                "sandbox",
                "network",
                "sandbox_read",
                "sandbox_write",
                "secret_allow",
            ] {
                if let Some(v) = run.get(key) {
                    lines.push(format!("run.{key} = {v}"));
                }
            }
        }
        if let Some(toml::Value::Table(roles)) = config.extra.get("roles") {
            flatten("roles", roles, &mut lines);
        }
        // Where the runners' forge token goes, and from which variable (as an `http` backend's key).
        if let Some(toml::Value::Table(forge)) = config.extra.get("forge") {
            flatten("forge", forge, &mut lines);
        }
        for (name, blob) in prompts {
            lines.push(format!("{}/{name} = blob {blob}", crate::state::PROMPTS_DIR));
        }
        lines.sort();
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
        let digest = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        Document { lines, digest }
    }

    /// The first 12 characters of the digest, as messages show it.
    pub(crate) fn short(&self) -> &str {
        &self.digest[..12]
    }
}

fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in table {
        let key = format!("{prefix}.{k}");
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => out.push(format!("{key} = {other}")),
        }
    }
}

/// The digests trusted here: `trusted` (this clone's `swarm.trusted` entries) and `$GIT_SWARM_TRUST` of `env`.
pub(crate) fn trusted_digests(trusted: &[String], env: &crate::environment::Environment) -> Vec<String> {
    let mut all: Vec<String> = trusted.iter().map(|d| d.trim().to_ascii_lowercase()).collect();
    all.extend(env.trust().iter().cloned());
    all
}

/// The entry that trusts whatever the shared settings say: for a swarm whose state ref only its owner can push
/// (a bare repository of one's own), set deliberately (`git config swarm.trusted any`, `GIT_SWARM_TRUST=any`).
pub(crate) const ANY: &str = "any";

/// Is `doc` trusted by one of `digests` (its full digest — a prefix could be matched by a crafted document —, or
/// [`ANY`])?
pub(crate) fn is_trusted(doc: &Document, digests: &[String]) -> bool {
    digests.iter().any(|d| d == ANY || *d == doc.digest)
}

/// The digests this clone's git config trusts (`swarm.trusted`, every entry, from any level git reads).
pub(crate) fn clone_digests(repo: &gix::Repository) -> Vec<String> {
    repo.config_snapshot()
        .strings(TRUST_KEY)
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.to_string().trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Record `doc` as trusted by the clone whose common git directory is `common_dir`: an entry of `swarm.trusted`
/// in its own config (`git config --local --add`), and the document kept to say later what changed. Nothing is
/// written when the digest is there already.
pub(crate) fn record(common_dir: &std::path::Path, doc: &Document) -> Result<bool, String> {
    keep(&common_dir.join("swarm"), doc);
    let mut get = crate::gitcmd::local(common_dir);
    get.arg("--git-dir").arg(common_dir).args(["config", "--local", "--get-all", TRUST_KEY]);
    let have = get.output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    if have.lines().any(|l| l.trim() == doc.digest) {
        return Ok(false);
    }
    let mut add = crate::gitcmd::local(common_dir);
    add.arg("--git-dir").arg(common_dir).args(["config", "--local", "--add", TRUST_KEY, &doc.digest]);
    match add.output() {
        Ok(o) if o.status.success() => Ok(true),
        Ok(o) => Err(format!("git config --add {TRUST_KEY}: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Err(format!("cannot run git config: {e}")),
    }
}

/// Where a clone keeps the documents it trusted (`<git dir>/swarm/trusted/<digest>`), to say what changed since.
pub(crate) fn kept_path(home: &std::path::Path, digest: &str) -> std::path::PathBuf {
    home.join("trusted").join(digest)
}

/// Keep `doc` as trusted under `home` (`<git dir>/swarm`), best effort.
pub(crate) fn keep(home: &std::path::Path, doc: &Document) {
    let path = kept_path(home, &doc.digest);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let text: String = doc.lines.iter().map(|l| format!("{l}\n")).collect();
    let _ = std::fs::write(path, text);
}

/// The newest kept document among `trusted` (by file time), if any.
pub(crate) fn last_trusted(home: &std::path::Path, trusted: &[String]) -> Option<Document> {
    let newest = trusted
        .iter()
        .filter_map(|d| {
            let p = kept_path(home, d.trim());
            let t = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((t, p, d.trim().to_string()))
        })
        .max_by_key(|(t, _, _)| *t)?;
    let text = std::fs::read_to_string(newest.1).ok()?;
    Some(Document { lines: text.lines().map(str::to_string).collect(), digest: newest.2 })
}

/// The lines of `now` that are not in `before`, and those of `before` gone from `now`: what changed, for a message.
pub(crate) fn changes(before: Option<&Document>, now: &Document) -> Vec<String> {
    let Some(before) = before else { return now.lines.iter().map(|l| format!("+ {l}")).collect() };
    let mut out: Vec<String> =
        before.lines.iter().filter(|l| !now.lines.contains(l)).map(|l| format!("- {l}")).collect();
    out.extend(now.lines.iter().filter(|l| !before.lines.contains(l)).map(|l| format!("+ {l}")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        toml::from_str(text).expect("toml")
    }

    #[test]
    fn the_document_names_what_runners_run_and_its_digest_follows_every_change() {
        let a = Document::of(
            &cfg(
                "target = \"main\"\n[run]\ncheck = \"make\"\ntask_timeout = \"30m\"\n[roles.worker]\npreset = \"claude\"\n",
            ),
            &[],
        );
        assert_eq!(a.lines, ["roles.worker.preset = \"claude\"", "run.check = \"make\"", "target = \"main\""]);
        assert_eq!(a.digest.len(), 64);
        // A setting that runs nothing (a timeout) does not change the digest; a command, an endpoint, a prompt does.
        let b = Document::of(
            &cfg(
                "target = \"main\"\n[run]\ncheck = \"make\"\ntask_timeout = \"1h\"\n[roles.worker]\npreset = \"claude\"\n",
            ),
            &[],
        );
        assert_eq!(a.digest, b.digest);
        let c = Document::of(
            &cfg("target = \"main\"\n[run]\ncheck = \"make; curl evil\"\n[roles.worker]\npreset = \"claude\"\n"),
            &[],
        );
        assert_ne!(a.digest, c.digest);
        assert_eq!(changes(Some(&a), &c), ["- run.check = \"make\"", "+ run.check = \"make; curl evil\""]);
        let blob = ObjectId::null(gix::hash::Kind::Sha1);
        let d = Document::of(
            &cfg("target = \"main\"\n[run]\ncheck = \"make\"\n[roles.worker]\npreset = \"claude\"\n"),
            &[("worker.md".into(), blob)],
        );
        assert_ne!(a.digest, d.digest);
        assert!(is_trusted(&a, std::slice::from_ref(&a.digest)));
        assert!(!is_trusted(&a, &[a.short().to_string()]), "a prefix trusts nothing");
        assert!(!is_trusted(&c, std::slice::from_ref(&a.digest)));
    }
}
