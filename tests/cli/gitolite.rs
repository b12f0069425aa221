//! A runner against gitolite3 over OpenSSH on loopback, holding exactly the rights docs/security.md gives a runner
//! ("The rights a runner needs, ref by ref"): it inits, claims, lands, keeps failed work aside and lands its
//! retry; what is a person's (`compact`, a force of the target, a delete of the state) is refused to it and works
//! for an admin. The rules are gitolite's own, enforced by its `update` hook, ref by ref.

use std::path::{Path, PathBuf};

use crate::common;
use crate::common::sshd::Sshd;
use crate::common::{Env, Out};

/// The rules of docs/security.md, for a repository `app` whose swarm lands on `main`.
const CONF: &str = "\
@swarm-runners = runner
repo gitolite-admin
    RW+     = admin
repo app
    RW+                              = admin
    RW      refs/swarm/              = @swarm-runners
    RW      refs/heads/main          = @swarm-runners
    RW+     refs/swarm-work/         = @swarm-runners
    -       refs/                    = @swarm-runners
    R                                = @swarm-runners
";

struct Gitolite {
    sshd: Sshd,
    home: PathBuf,
    admin: String,
    runner: String,
}

impl Gitolite {
    /// gitolite's home in the test's folder (`gitolite setup`, then the rules compiled in place), and sshd logging
    /// in `admin` and `runner` by their keys, each through `gitolite-shell` as a gitolite account does.
    fn start(env: &Env, sshd_program: &Path, gitolite: &Path) -> Gitolite {
        let sshd = Sshd::start(env, sshd_program, &env.path("sshd"));
        let home = env.path("gitolite");
        std::fs::create_dir_all(&home).expect("gitolite home");
        let (admin_key, runner_key) = (sshd.new_key("admin"), sshd.new_key("runner"));
        let pubkey = |k: &Path| std::fs::read_to_string(k.with_extension("pub")).expect("public key");
        let gl = |args: &[&str]| {
            let o = Out::from(env.command(gitolite).env("HOME", &home).args(args).output().expect("run gitolite"));
            assert_eq!(o.code, 0, "gitolite {args:?}: {}{}", o.stdout, o.stderr);
        };
        gl(&["setup", "-pk", admin_key.with_extension("pub").to_str().expect("utf-8")]);
        std::fs::write(home.join(".gitolite/keydir/runner.pub"), pubkey(&runner_key)).expect("runner key");
        std::fs::write(home.join(".gitolite/conf/gitolite.conf"), CONF).expect("gitolite.conf");
        gl(&["compile"]);
        gl(&["trigger", "POST_COMPILE"]);
        // The login's own home is the machine's; gitolite's is this one.
        let shell = "/usr/share/gitolite3/gitolite-shell";
        let line = |user: &str, key: &Path| {
            format!(
                "command=\"HOME={} {shell} {user}\",no-port-forwarding,no-X11-forwarding,no-agent-forwarding,no-pty {}",
                home.display(),
                pubkey(key).trim()
            )
        };
        sshd.authorize(&format!("{}\n{}\n", line("admin", &admin_key), line("runner", &runner_key)));
        let (admin, runner) = (sshd.ssh_command_with(&admin_key), sshd.ssh_command_with(&runner_key));
        Gitolite { sshd, home, admin, runner }
    }

    fn url(&self) -> String {
        format!("ssh://{}@127.0.0.1:{}/app", self.sshd.user(), self.sshd.port)
    }

    /// The repository on the server.
    fn bare(&self) -> PathBuf {
        self.home.join("repositories/app.git")
    }

    /// A clone of `app` as `who` (its ssh command), which keeps using that identity.
    fn clone_as(&self, env: &Env, ssh: &str, name: &str) -> PathBuf {
        self.sshd.clone_with(env, &self.url(), ssh, name)
    }
}

fn tasks(env: &Env, dir: &Path) -> Vec<serde_json::Value> {
    env.sw(dir, &["list", "--json"]).ok().json().as_array().cloned().unwrap_or_default()
}

#[test]
fn a_runner_with_the_documented_rights_of_gitolite_lands_and_what_is_a_persons_is_refused_to_it() {
    let test = "a_runner_with_the_documented_rights_of_gitolite_lands_and_what_is_a_persons_is_refused_to_it";
    let Some(sshd) = common::sshd::sshd_or_skip(test) else { return };
    let Some(gitolite) = common::tool_or_skip(test, "gitolite", "apt-get install gitolite3") else { return };
    let env = Env::new();
    let server = Gitolite::start(&env, &sshd, &gitolite);
    // The admin seeds main (the repository is empty).
    let admin = server.clone_as(&env, &server.admin.clone(), "admin");
    std::fs::write(admin.join("README.md"), "app\n").expect("write");
    env.git(&admin, &["add", "README.md"]);
    env.git(&admin, &["commit", "-q", "-m", "root"]);
    env.git(&admin, &["push", "-q", "origin", "HEAD:refs/heads/main"]);

    // The runner: init creates the state ref, tasks are added, a worker drains them.
    let runner = server.clone_as(&env, &server.runner.clone(), "runner");
    let cfg = env.path("swarm.toml");
    // The check fails the work of a first claim that wrote `broken.txt`: a failed check keeps the work aside.
    let config =
        format!("[run]\ncheck = \"test ! -f broken.txt\"\n[roles.worker]\nexec = {:?}\n", common::scripted_agent());
    std::fs::write(&cfg, config).expect("config");
    let o = env.sw(&runner, &["init", "--config", cfg.to_str().expect("utf-8")]);
    assert_eq!(o.code, 0, "init as the runner: {}", o.stderr);
    env.sw(&runner, &["add", "plain", "--body", "@write a.txt a"]).ok();
    // Fails its first claim's check (its work kept aside: a ref created), lands on its second.
    let retried =
        env.sw(&runner, &["add", "retried", "--body", "@write b.txt b\n@first-write broken.txt x"]).ok().line();
    let o = env.sw(&runner, &["--agent", "r1", "run", "worker", "--until-idle"]);
    assert_eq!(o.code, 0, "the runner over gitolite: {}", o.stderr);
    let list = tasks(&env, &runner);
    assert_eq!(list.len(), 2);
    assert!(list.iter().all(|t| t["status"] == "done"), "{list:?}");
    let bare = server.bare();
    let kept = format!("refs/swarm-work/default/{retried}/1");
    assert!(env.rev(&bare, &kept).is_some(), "the failed attempt's work was not kept at {kept}:\n{}", o.stderr);
    let main = env.git(&bare, &["log", "--format=%s", "main"]);
    assert_eq!(main.lines().count(), 3, "{main}");
    let state = env.rev(&bare, "refs/swarm/default").expect("the state ref");

    // What is a person's is refused to the runner, by gitolite, and the remote is as it was.
    let o = env.sw(&runner, &["compact"]);
    assert_ne!(o.code, 0, "compact (a force of the state ref) went through for the runner: {}", o.stdout);
    assert!(o.stderr.contains("refused") || o.stderr.contains("DENIED"), "{}", o.stderr);
    assert_eq!(env.rev(&bare, "refs/swarm/default").as_deref(), Some(state.as_str()), "the state ref moved");
    let root = env.git(&bare, &["rev-list", "--max-parents=0", "main"]).trim().to_string();
    for (what, args) in [
        ("a force of the target", vec!["push", "--force", "origin", &format!("{root}:refs/heads/main")]),
        ("a delete of the state ref", vec!["push", "origin", ":refs/swarm/default"]),
        ("another branch", vec!["push", "origin", "HEAD:refs/heads/elsewhere"]),
        ("a tag", vec!["push", "origin", "HEAD:refs/tags/v1"]),
    ] {
        let o = env.git_out(&runner, &args);
        assert_ne!(o.code, 0, "{what} went through for the runner");
        assert!(o.stderr.contains("DENIED"), "{what}: not refused by gitolite: {}", o.stderr);
    }
    assert_eq!(env.rev(&bare, "refs/swarm/default").as_deref(), Some(state.as_str()));
    assert!(env.rev(&bare, "refs/heads/elsewhere").is_none() && env.rev(&bare, "refs/tags/v1").is_none());

    // The admin compacts: the history archived, the kept work of done tasks pruned.
    let o = env.sw(&admin, &["compact", "--json"]);
    assert_eq!(o.code, 0, "compact as the admin: {}", o.stderr);
    let archived = env.git(&bare, &["for-each-ref", "--format=%(refname)", "refs/swarm-archive/"]);
    assert_eq!(archived.lines().count(), 1, "{archived}");
    assert!(env.rev(&bare, &kept).is_none(), "compact did not prune {kept}");

    // And the runner goes on from the new root.
    env.sw(&runner, &["add", "after", "--body", "@write c.txt c"]).ok();
    let o = env.sw(&runner, &["--agent", "r1", "run", "worker", "--until-idle"]);
    assert_eq!(o.code, 0, "the runner after compact: {}", o.stderr);
    assert!(tasks(&env, &runner).iter().all(|t| t["status"] == "done"));
    assert_eq!(env.git(&bare, &["rev-list", "--count", "main"]).trim(), "4");
}
