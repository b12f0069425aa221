//! The escapes of issue 34, each tried by a hostile agent in a test of its own: doors a hostile review found open in
//! the runner as it was (each reproduced there), through which what an agent left ran or wrote outside its sandbox,
//! as the runner. The agent is a shell script (in the test's folder: the sandbox hides /tmp) that tries the door and
//! writes what it got into a file of its work tree (which lands with the task, so the test reads it on the target).
//! What must never happen is asserted where the agent cannot reach: a marker under the runner's home (which the
//! sandbox hides, read-only and empty, so only a process of the runner's outside it could make the file), a file of
//! the person's that must stay as it was, a secret that must not be in what the agent read.
//!
//! Every attack runs with the runner as root (as the suite runs in CI) and again with the runner as the unprivileged
//! user `swarm-tester` (`useradd -m swarm-tester`): skipped with a line when the suite is not root or there is no
//! such user, a failure instead under `GIT_SWARM_REQUIRE_ALL=1`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common;
use crate::common::{BIN, Env, Out, chown_all, door, path_url, sandbox_or_skip};

fn require_all() -> bool {
    std::env::var("GIT_SWARM_REQUIRE_ALL").is_ok_and(|v| v == "1")
}

/// Who runs the runner.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    /// The user the suite runs as (root in CI).
    Suite,
    /// `swarm-tester`, when the suite is root: its uid and gid.
    Tester(u32, u32),
}

impl Who {
    fn is_root(self) -> bool {
        self == Who::Suite && nix::unistd::geteuid().is_root()
    }

    fn label(self) -> String {
        match self {
            Who::Suite if self.is_root() => "as root".into(),
            Who::Suite => format!("as uid {}", nix::unistd::geteuid()),
            Who::Tester(uid, _) => format!("as swarm-tester (uid {uid})"),
        }
    }
}

/// The runners an attack is tried as: the suite's own user, then `swarm-tester` when the suite is root and it
/// exists (else a line saying why not, or a failure under `GIT_SWARM_REQUIRE_ALL=1`).
fn runners(test: &str) -> Vec<Who> {
    let mut who = vec![Who::Suite];
    if !nix::unistd::geteuid().is_root() {
        assert!(!require_all(), "{test}: the runner as another user needs root and GIT_SWARM_REQUIRE_ALL=1");
        println!("{test}: the runner as swarm-tester skipped: the suite is not root");
        return who;
    }
    match nix::unistd::User::from_name("swarm-tester").ok().flatten() {
        Some(u) => who.push(Who::Tester(u.uid.as_raw(), u.gid.as_raw())),
        None => {
            assert!(!require_all(), "{test}: no user swarm-tester (useradd -m swarm-tester)");
            println!("{test}: the runner as swarm-tester skipped: no such user");
        }
    }
    who
}

/// The runners an attack is tried as, where a sandbox starts (else none, and a line saying why).
fn attempts(test: &str) -> Vec<Who> {
    if sandbox_or_skip(test) { runners(test) } else { Vec::new() }
}

/// The most memory (KiB of address space) a runner of these tests may take: an unbounded read of what an agent left
/// (`/dev/zero`) ends the runner instead of the machine.
const RUNNER_KIB: u64 = 4 << 20;

/// The variables every agent of these tests gets (named in `[roles.worker] env`, as a user would name them).
const AGENT_VARS: &[&str] = &["RUNNER_HOME", "REMOTE", "PROBES", "CARGO_HOME", "DOCKER_CONFIG", "PERSON_CARGO"];

/// What a hostile agent says before it tries anything: its report, and `say <door> <what it got>`.
const PRELUDE: &str = "set -u\nr=\"${REPORT:-report.txt}\"\nsay() { printf '%s: %s\\n' \"$1\" \"$2\" >> \"$r\"; }\n";

struct World {
    env: Env,
    bare: PathBuf,
    clones: Vec<PathBuf>,
    who: Who,
    /// Variables of the runner's environment (some reach the agent: [`AGENT_VARS`]).
    vars: Vec<(String, String)>,
}

/// A swarm of `n` clones whose worker runs `script` (after [`PRELUDE`]), with `run` as its `[run]` settings;
/// `setup` runs on the clones before everything is given to the runner's user.
fn world(who: Who, script: &str, run: &str, n: usize, setup: impl FnOnce(&Env, &Path, &[PathBuf])) -> World {
    let env = Env::new();
    let agent = env.path("agent.sh");
    std::fs::write(&agent, format!("{PRELUDE}{script}")).expect("agent");
    let vars = AGENT_VARS.iter().map(|v| format!("\"{v}\"")).collect::<Vec<_>>().join(", ");
    let config = format!("[run]\n{run}\n[roles.worker]\nexec = \"sh {}\"\nenv = [{vars}]\n", agent.display());
    let (bare, clones) = env.swarm_with_config(path_url, n, &config);
    // The runner's home holds what a person's does: an ssh key, their shell's startup file, the keys that may log in.
    let home = &env.home;
    std::fs::create_dir_all(home.join(".ssh")).expect("ssh");
    std::fs::write(home.join(".ssh/id_ed25519"), "-----BEGIN OPENSSH PRIVATE KEY----- secret-key-bytes\n")
        .expect("key");
    std::fs::write(home.join(".ssh/authorized_keys"), "ssh-ed25519 AAAAC3the-persons-own-key person@laptop\n")
        .expect("authorized_keys");
    std::fs::write(home.join(".bashrc"), "# the person's shell\nalias ll='ls -l'\n").expect("bashrc");
    setup(&env, &bare, &clones);
    if let Who::Tester(uid, gid) = who {
        chown_all(env.root.path(), uid, gid);
    }
    let vars = vec![
        ("RUNNER_HOME".to_string(), home.display().to_string()),
        ("REMOTE".to_string(), bare.display().to_string()),
        ("PROBES".to_string(), env.path("secrets").display().to_string()),
    ];
    World { env, bare, clones, who, vars }
}

impl World {
    /// `program args…` in `dir`, in the test's environment, as the runner's user.
    fn command(&self, program: &str, dir: &Path) -> Command {
        let mut cmd = self.env.command(program);
        cmd.current_dir(dir).envs(self.vars.iter().map(|(k, v)| (k, v)));
        if let Who::Tester(uid, gid) = self.who {
            std::os::unix::process::CommandExt::uid(&mut cmd, uid);
            std::os::unix::process::CommandExt::gid(&mut cmd, gid);
        }
        cmd
    }

    /// `git swarm args…` in `dir` as the runner's user.
    fn sw(&self, dir: &Path, args: &[&str]) -> Out {
        Out::from(self.command(BIN, dir).args(args).output().expect("run git-swarm"))
    }

    /// Start `git swarm --agent <agent> args…` in `dir` as the runner's user, its memory bounded ([`RUNNER_KIB`]).
    fn spawn(&self, dir: &Path, agent: &str, args: &[&str]) -> Child {
        let bounded = format!("ulimit -v {RUNNER_KIB} && exec \"$0\" \"$@\"");
        self.command("sh", dir)
            .args(["-c", &bounded, BIN, "--agent", agent])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the runner")
    }

    /// Run one worker with `args` in the first clone to its end (at most `secs`).
    fn run(&self, args: &[&str], secs: u64) -> Out {
        let out =
            common::finish(self.spawn(&self.clones[0], "w", args), secs, &format!("the runner {}", self.who.label()));
        println!("--- the runner, {}:\n{}", self.who.label(), out.stderr);
        out
    }

    /// A task as `show --json` has it.
    fn task(&self, id: &str) -> serde_json::Value {
        self.sw(&self.clones[0], &["show", id, "--json"]).ok().json()
    }

    /// What the agent wrote into `file` of its work tree, as it landed on the target.
    fn landed(&self, file: &str) -> String {
        let text = self.env.git_out(&self.bare, &["show", &format!("main:{file}")]).stdout;
        println!("--- {file}, {}:\n{text}", self.who.label());
        text
    }

    /// Files under the runner's home whose name starts with `escaped`: made by something that ran outside the
    /// sandbox (the sandbox shows the agent that home as an empty, read-only folder).
    fn escaped(&self) -> Vec<String> {
        std::fs::read_dir(&self.env.home)
            .expect("home")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("escaped"))
            .collect()
    }

    /// Every branch of a repository, with its commit.
    fn branches(&self, repo: &Path) -> String {
        self.env.git(repo, &["for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"])
    }
}

/// Two tasks that write the same file, so that the second to land meets a conflict, for certain: "right" is
/// claimed first by a runner in the second clone, whose agent waits until the remote's `main` moves; "left" is then
/// added and landed by a runner in the first clone; "right" is rebased onto it, conflicts in `shared.txt`, and its
/// conflict run (`GIT_SWARM_CONFLICT=1`) calls the test's `in_conflict` (which resolves the file, or not). The
/// test's `on_left` runs after the left agent's work. Both runners' outputs, and the ids of left and right.
const CONFLICT_WORLD: &str = r#"
remote_main() { cat "$REMOTE/refs/heads/main" 2>/dev/null || sed -n 's| refs/heads/main$||p' "$REMOTE/packed-refs"; }
resolve() { grep -v '^\(<<<<<<<\|=======\|>>>>>>>\)' shared.txt > shared.new; cat shared.new > shared.txt; rm -f shared.new; }
if [ "${GIT_SWARM_CONFLICT:-}" = 1 ]; then
  r=conflict-report.txt
  # (Read only as a regular file: what a conflict run before this one left there may be anything.)
  [ -f shared.txt ] && [ ! -L shared.txt ] && say markers "$(grep -c '^<<<<<<<' shared.txt)" || say markers "not a file"
  in_conflict
  exit 0
fi
case "$GIT_SWARM_TASK_TITLE" in
  left) echo from-left > shared.txt; on_left ;;
  right)
    base=$(git rev-parse HEAD); n=0
    while [ "$(remote_main)" = "$base" ] && [ "$n" -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
    echo from-right > shared.txt ;;
esac
"#;

/// What the two runners of [`CONFLICT_WORLD`] did.
struct Conflict {
    left: Out,
    right: Out,
    left_id: String,
    right_id: String,
    /// The most memory the right task's runner held at once (KiB).
    right_peak: u64,
}

impl Conflict {
    /// Both runners ended well, the right task through a conflict run, both tasks are done and `shared.txt` holds
    /// both sides.
    fn both_landed(&self, w: &World) {
        let (who, a, b) = (w.who.label(), &self.left, &self.right);
        assert_eq!((a.code, b.code), (0, 0), "{who}:\n{}\n{}", a.stderr, b.stderr);
        assert!(b.stderr.contains("rebase conflict on"), "{who}: no conflict run:\n{}", b.stderr);
        for id in [&self.left_id, &self.right_id] {
            assert_eq!(w.task(id)["status"], "done", "{who}: {}\n{}", a.stderr, b.stderr);
        }
        let shared = w.landed("shared.txt");
        assert!(shared.contains("from-left") && shared.contains("from-right"), "{who}: a side was lost: {shared}");
    }
}

/// The two runners of [`CONFLICT_WORLD`], each given a minute.
fn conflict(w: &World) -> Conflict {
    let (c0, c1) = (&w.clones[0], &w.clones[1]);
    let right_id = w.sw(c1, &["add", "right"]).ok().line();
    let b = w.spawn(c1, "w2", &["run", "worker", "--once"]);
    let peak = watch_peak(b.id());
    common::wait_until(60, "the right task claimed", || w.task(&right_id)["status"] == "claimed");
    let left_id = w.sw(c0, &["add", "left"]).ok().line();
    let left = common::finish(w.spawn(c0, "w1", &["run", "worker", "--once"]), 60, "left's runner");
    let right = common::finish(b, 60, "right's runner (the conflict run)");
    let right_peak = peak.join().expect("the watch");
    println!("--- right's runner held at most {right_peak} KiB");
    println!("--- left's runner, {}:\n{}\n--- right's runner:\n{}", w.who.label(), left.stderr, right.stderr);
    Conflict { left, right, left_id, right_id, right_peak }
}

/// Watch the peak resident memory (`VmHWM`, KiB) of the process `pid` until it is gone: the most it held.
fn watch_peak(pid: u32) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).map(|v| v.trim().trim_end_matches("kB"));
            peak = peak.max(kib.and_then(|v| v.trim().parse().ok()).unwrap_or(0));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        peak
    })
}

/// **A nested repository's filter.** The agent makes `sub/` a repository of its own (a commit in it, its config a
/// clean filter for every file and an fsmonitor command, each touching a marker under the runner's home), commits
/// `sub` as a gitlink of its work and then changes a file in it; it makes `loose/` the same way and leaves it
/// untracked. A `git add --all` or `git commit` of the runner in that work tree asks git for the state of the
/// "submodule", which runs `git status` in it with its own config: the filter ran as the runner, outside the
/// sandbox. What held: the runner takes the work tree as data (`runner::snapshot`: no git process looks at it), a
/// gitlink of the agent's commit stays as it was, an untracked nested repository is left out and said.
#[test]
fn a_nested_repositorys_filter_never_runs_as_the_runner() {
    const AGENT: &str = r#"
nested() {
  git init -q "$1" && (
    cd "$1" && git config user.name nested && git config user.email nested@example.com &&
    printf '* filter=x\n' > .gitattributes && echo one > f.txt &&
    git config filter.x.clean "sh -c 'touch \"$RUNNER_HOME/escaped-clean-$1\"; cat'" &&
    git config filter.x.smudge "sh -c 'touch \"$RUNNER_HOME/escaped-smudge-$1\"; cat'" &&
    git config core.fsmonitor "touch '$RUNNER_HOME/escaped-fsmonitor-$1'; exit 1;" &&
    git add -A && git commit -qm nested
  ) && echo two >> "$1/f.txt" && echo three > "$1/new.txt"
}
echo work > work.txt
nested sub
git add work.txt sub 2>/dev/null && git commit -qm 'work, with sub as a gitlink'
say sub "$(git ls-files -s sub | cut -c1-6)"
echo four >> sub/f.txt
nested loose
say loose "$(ls -A loose | tr '\n' ' ')"
exit 0
"#;
    let test = "a_nested_repositorys_filter_never_runs_as_the_runner";
    for who in attempts(test) {
        let w = world(who, AGENT, "", 1, |_, _, _| {});
        let id = w.sw(&w.clones[0], &["add", "nested"]).ok().line();
        let out = w.run(&["run", "worker", "--once"], 120);
        let who = who.label();
        assert!(w.escaped().is_empty(), "{who}: the nested repository's config ran as the runner: {:?}", w.escaped());
        assert_eq!(out.code, 0, "{who}: {}", out.stderr);
        let report = w.landed("report.txt");
        assert_eq!(door(&report, "sub"), "160000", "{who}: the agent's commit holds sub as a gitlink: {report}");
        assert_eq!(w.task(&id)["status"], "done", "{who}: {}", out.stderr);
        // The work landed; of the nested repositories nothing but the gitlink the agent committed, and the loose one
        // is said.
        let tree = w.env.git(&w.bare, &["ls-tree", "-r", "main"]);
        assert!(tree.contains("\twork.txt"), "{who}: {tree}");
        assert!(!tree.contains("loose") && !tree.contains("sub/"), "{who}: a nested repository's files landed: {tree}");
        assert!(out.stderr.contains("loose/: a nested git repository"), "{who}: not said: {}", out.stderr);
    }
}

/// **Rebase state in a conflict run.** The conflict run's agent writes a `git-rebase-todo` with an `exec` line
/// (touching a marker under the runner's home) where `git rev-parse --git-path rebase-merge` says, with a
/// plausible rebase state around it when there is none, resolves the file and exits 0. When the runner went on with
/// the agent's rebase (`git rebase --continue` in its work tree), git ran the line as the runner. What held: no
/// rebase is in the agent's reach (the runner rebases with `git merge-tree` in its own state and takes the conflict
/// run's files), so nothing of the agent's rebase state is ever read.
#[test]
fn a_planted_rebase_todo_never_runs_as_the_runner() {
    const AGENT: &str = r#"
on_left() { :; }
in_conflict() {
  state=$(git rev-parse --git-path rebase-merge)
  if [ ! -d "$state" ]; then
    mkdir -p "$state"
    git rev-parse HEAD > "$state/onto"; git rev-parse HEAD > "$state/orig-head"
    echo detached HEAD > "$state/head-name"; : > "$state/interactive"; echo 1 > "$state/msgnum"; echo 1 > "$state/end"
    say state made
  else
    say state found
  fi
  line="exec sh -c 'touch \"$RUNNER_HOME/escaped-rebase-exec\"'"
  { echo "$line"; cat "$state/git-rebase-todo" 2>/dev/null || :; } > "$state/todo.new" && mv "$state/todo.new" "$state/git-rebase-todo"
  { echo "$line"; cat "$state/done" 2>/dev/null || :; } > "$state/done.new" && mv "$state/done.new" "$state/done"
  say todo "$(head -1 "$state/git-rebase-todo")"
  resolve
}
"#;
    let test = "a_planted_rebase_todo_never_runs_as_the_runner";
    for who in attempts(test) {
        let w = world(who, &format!("{AGENT}{CONFLICT_WORLD}"), "", 2, |_, _, _| {});
        let c = conflict(&w);
        let who = who.label();
        assert!(w.escaped().is_empty(), "{who}: the planted exec line ran as the runner: {:?}", w.escaped());
        let report = w.landed("conflict-report.txt");
        assert!(door(&report, "todo").starts_with("exec "), "{who}: the agent planted nothing: {report}");
        c.both_landed(&w);
    }
}

/// **The person's branches moved.** An agent (in its run and in a conflict run) points its `HEAD` at a branch of
/// the person's clone (`ref: refs/heads/mine`), names another (`feature`) as the `head-name` of a rebase state it
/// makes, and moves, deletes and makes branches in its git directory. When the runner committed, aborted or
/// continued a rebase in the agent's work tree with the clone's refs, its git moved the person's branches. What
/// held: the agent's git directory is a repository of its own in its run folder (a copy of the refs); the runner
/// reads its `HEAD` as text and never runs git there. Every branch of both clones is as it was, and the remote's
/// `main` moved only by the landings.
#[test]
fn the_persons_branches_stay_where_they_were() {
    const AGENT: &str = r#"
forge() {
  gd=$(git rev-parse --git-dir)
  git add -A && git commit -qm "$1" && work=$(git rev-parse HEAD)
  git update-ref refs/heads/mine "$work"; git update-ref refs/heads/main "$work"
  git update-ref -d refs/heads/feature; git update-ref refs/heads/evil "$work"
  printf 'ref: refs/heads/mine\n' > "$gd/HEAD"
  mkdir -p "$gd/rebase-merge"
  echo refs/heads/feature > "$gd/rebase-merge/head-name"; echo "$work" > "$gd/rebase-merge/orig-head"
  echo "$work" > "$gd/rebase-merge/onto"; : > "$gd/rebase-merge/interactive"
  say "$1" "$(cat "$gd/HEAD")"
}
on_left() { forge left; }
in_conflict() { resolve; forge conflict; }
"#;
    let test = "the_persons_branches_stay_where_they_were";
    for who in attempts(test) {
        let w = world(who, &format!("{AGENT}{CONFLICT_WORLD}"), "", 2, |env, bare, clones| {
            // Each clone has branches of the person's: one with a commit of theirs, one where main is.
            for c in clones {
                env.git(c, &["switch", "-q", "-c", "mine"]);
                std::fs::write(c.join("mine.txt"), "the person's work\n").expect("write");
                env.git(c, &["add", "mine.txt"]);
                env.git(c, &["commit", "-qm", "the person's own commit"]);
                env.git(c, &["switch", "-q", "main"]);
                env.git(c, &["branch", "feature"]);
            }
            env.git(bare, &["branch", "keep", "main"]);
        });
        let before: Vec<String> = w.clones.iter().map(|c| w.branches(c)).collect();
        let base = w.env.git(&w.bare, &["rev-parse", "main"]);
        let keep = w.env.git(&w.bare, &["rev-parse", "keep"]);
        let c = conflict(&w);
        let who = who.label();
        for (clone, was) in w.clones.iter().zip(&before) {
            let (a, b) = (&c.left.stderr, &c.right.stderr);
            assert_eq!(&w.branches(clone), was, "{who}: a branch of {} moved\n{a}\n{b}", clone.display());
        }
        assert_eq!(w.env.git(&w.bare, &["rev-parse", "keep"]), keep, "{who}");
        assert_eq!(
            w.env.git(&w.bare, &["for-each-ref", "--format=%(refname)", "refs/heads"]),
            "refs/heads/keep\nrefs/heads/main",
            "{who}"
        );
        assert!(door(&w.landed("report.txt"), "left").contains("refs/heads/mine"), "{who}");
        assert!(door(&w.landed("conflict-report.txt"), "conflict").contains("refs/heads/mine"), "{who}");
        // The remote's main moved by the two landings alone: each commit since is stamped as one of them.
        let stamps = w.env.git(
            &w.bare,
            &["log", "--first-parent", "--format=%(trailers:key=Swarm-Task,valueonly)%x00", &format!("{base}..main")],
        );
        let stamps: Vec<&str> = stamps.split('\0').map(str::trim).filter(|s| !s.is_empty()).collect();
        let ours = |s: &&str| *s == c.left_id || *s == c.right_id;
        assert!(!stamps.is_empty() && stamps.iter().all(ours), "{who}: {stamps:?}");
        c.both_landed(&w);
    }
}

/// **Writes through links in the run folder.** The first task's agent replaces every file and folder of its run
/// folder (the prompt, the excludes, the hand-off, its fresh home, its git directory's config…) and the names the
/// runner writes later (`check-input.txt`, `outbox.toml`, the usage file…) with symbolic links to files of the
/// person's that the sandbox hides: `~/.bashrc`, `~/.ssh/authorized_keys`, the home itself. A runner that wrote
/// the next run's prompt (the check's input, the second task's files) into the same folder followed the links and
/// wrote the person's files. What held: every run folder is made afresh (the old one removed without following a
/// link), its files created where nothing is (`O_EXCL`), and read after the run through `agent::files`.
#[test]
fn links_in_the_run_folder_never_lead_the_runners_writes() {
    const AGENT: &str = r#"
case "$GIT_SWARM_TASK_TITLE" in
  after) echo after > after.txt; exit 0 ;;
esac
echo planted > planted.txt
run=$(dirname "$GIT_SWARM_PROMPT_FILE")
say run-folder "$(ls -A "$run" | tr '\n' ' ')"
i=0
link() {
  case $((i % 3)) in 0) t="$RUNNER_HOME/.bashrc" ;; 1) t="$RUNNER_HOME/.ssh/authorized_keys" ;; *) t="$RUNNER_HOME/.gitconfig" ;; esac
  i=$((i + 1))
  rm -rf "$1" 2>/dev/null; ln -s "$t" "$1" 2>/dev/null && n=$((n + 1))
}
n=0
for f in "$run"/* "$run"/.[!.]* "$run"/home/* "$run"/home/.[!.]* "$run/git/config" "$run/git/info/exclude" "$run/git/packed-refs" "$run/git/objects/info/alternates"; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  case "$f" in "$run/git"|"$run/home") continue ;; esac
  [ -d "$f" ] && [ ! -L "$f" ] && { rm -rf "$f"; ln -s "$RUNNER_HOME/.ssh" "$f" && n=$((n + 1)); continue; }
  link "$f"
done
for name in prompt.md agent-excludes handoff.md check-input.txt outbox.toml usage.json last-message.md pgid \
    "$(basename "${GIT_SWARM_HANDOFF_FILE:-handoff.md}")" "$(basename "${GIT_SWARM_USAGE_FILE:-usage.json}")"; do
  [ -L "$run/$name" ] || link "$run/$name"
done
say links "$n"
exit 0
"#;
    let test = "links_in_the_run_folder_never_lead_the_runners_writes";
    for who in attempts(test) {
        let w = world(who, AGENT, "check = \"true\"", 1, |env, _, clones| {
            let plant = env.sw(&clones[0], &["add", "plant"]).ok().line();
            env.sw(&clones[0], &["add", "after", "--after", &plant]).ok();
        });
        let home = &w.env.home;
        let files = [home.join(".bashrc"), home.join(".ssh/authorized_keys"), home.join(".gitconfig")];
        let before: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).expect("read")).collect();
        let out = w.run(&["run", "worker", "--until-idle"], 180);
        let who = who.label();
        for (f, was) in files.iter().zip(&before) {
            let now = std::fs::read(f).expect("read");
            assert!(
                &now == was,
                "{who}: {} was written through the run folder:\n{}\n--- runner\n{}",
                f.display(),
                String::from_utf8_lossy(&now),
                out.stderr
            );
        }
        assert!(std::fs::symlink_metadata(home.join(".ssh")).is_ok_and(|m| m.is_dir()), "{who}");
        assert_eq!(out.code, 0, "{who}: {}", out.stderr);
        let report = w.landed("report.txt");
        let links: u32 = door(&report, "links").parse().expect("a count");
        assert!(links >= 8, "{who}: the agent planted few links: {report}");
        let list = w.sw(&w.clones[0], &["list", "--json"]).ok().json();
        let after = list.as_array().expect("list").iter().find(|t| t["title"] == "after").cloned().expect("after");
        assert_eq!(after["status"], "done", "{who}: the runner went on to the next task: {after}\n{}", out.stderr);
        assert!(w.landed("after.txt").contains("after"), "{who}");
    }
}

/// **The terminal.** A runner started at a terminal (here a pseudo-terminal: `script`) has it as its controlling
/// terminal; an agent that shared it could open `/dev/tty`, write escapes to the person's screen or type into their
/// shell (`TIOCSTI`). The agent tries to write to `/dev/tty` and to type a character with `TIOCSTI` on its stdin
/// and on `/dev/tty`. What held: every agent starts in a session of its own (`agent::enter`, `--setsid`), with no
/// controlling terminal — in the sandbox and without one (`[run] sandbox = "off"`).
#[test]
fn an_agent_never_reaches_the_runners_terminal() {
    const AGENT: &str = r##"
(echo 'agent-on-the-terminal' > /dev/tty) 2>/dev/null && say tty written || say tty refused
if [ -x /usr/bin/python3 ]; then
  say tiocsti "$(/usr/bin/python3 -c '
import fcntl, os, termios
said = []
for name in ("stdin", "/dev/tty"):
    try:
        fd = 0 if name == "stdin" else os.open("/dev/tty", os.O_RDWR)
        fcntl.ioctl(fd, termios.TIOCSTI, b"#")
        said.append(name + " typed")
    except OSError:
        said.append(name + " refused")
print(", ".join(said))' 2>&1)"
else
  say tiocsti "stdin refused, /dev/tty refused (no python3 to try)"
fi
echo work > work.txt
exit 0
"##;
    let test = "an_agent_never_reaches_the_runners_terminal";
    let Some(script) = common::tool_or_skip(test, "script", "apt-get install util-linux") else { return };
    let sandbox = sandbox_or_skip(test);
    for who in runners(test) {
        for run in ["sandbox = \"off\"", "sandbox = \"auto\""] {
            if run.contains("auto") && !sandbox {
                continue;
            }
            let w = world(who, AGENT, run, 1, |_, _, _| {});
            w.sw(&w.clones[0], &["add", "terminal"]).ok();
            let tty = w.env.path("runner-tty");
            // The runner with the pseudo-terminal as its controlling terminal (`script` makes it so); what `tty`
            // says shows that it was.
            let line = format!(
                "tty > '{}'; exec sh -c 'ulimit -v {RUNNER_KIB} && exec \"$0\" \"$@\"' '{BIN}' --agent w run worker --once",
                tty.display()
            );
            let mut cmd = w.command(&script.to_string_lossy(), &w.clones[0]);
            cmd.args(["-qec", &line, "/dev/null"]).stdout(Stdio::piped()).stderr(Stdio::piped());
            let out = common::finish(cmd.spawn().expect("script"), 120, "the runner at a terminal");
            let who = format!("{} ({run})", who.label());
            assert_eq!(out.code, 0, "{who}: {}\n{}", out.stdout, out.stderr);
            let name = std::fs::read_to_string(&tty).unwrap_or_default();
            assert!(name.starts_with("/dev/pts/"), "{who}: the runner had no terminal: {name}");
            let report = w.landed("report.txt");
            assert_eq!(door(&report, "tty"), "refused", "{who}: the agent wrote to the runner's terminal: {report}");
            assert!(!out.stdout.contains("agent-on-the-terminal"), "{who}: {}", out.stdout);
            assert_eq!(door(&report, "tiocsti"), "stdin refused, /dev/tty refused", "{who}: {report}");
        }
    }
}

/// **Files the runner's uid can read.** A root runner's agent ran as uid 0 in a user namespace: it read every file
/// root owns that the sandbox shows, `/etc/shadow` and a `0600` file of root's in the test's folder among them.
/// What held: under a root runner the agent runs as `nobody` (`agent::enter`, after bubblewrap's mounts). Under the
/// runner as a user, the agent is that user: a `0600` file of the user's in a folder the sandbox shows stays
/// readable to it (docs/security.md says so: the sandbox hides homes, temporary folders and the clone's git, not
/// every file the uid owns), while the runner's home (`~/.ssh`) is hidden all the same.
#[test]
fn an_agent_reads_no_file_of_roots_and_no_home() {
    const AGENT: &str = r#"
say uid "$(id -u)"
say shadow "$(cat /etc/shadow 2>/dev/null | grep -c '^root:')"
say root-only "$(cat "$PROBES/root-only.txt" 2>&1 | head -c 80)"
say own "$(cat "$PROBES/own.txt" 2>&1 | head -c 80)"
say ssh-key "$(cat "$RUNNER_HOME/.ssh/id_ed25519" 2>&1 | head -c 80)"
echo work > work.txt
exit 0
"#;
    let test = "an_agent_reads_no_file_of_roots_and_no_home";
    for who in attempts(test) {
        let w = world(who, AGENT, "", 1, |env, _, _| std::fs::create_dir_all(env.path("secrets")).expect("secrets"));
        let secrets = w.env.path("secrets");
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // Root's: written by the suite (root in CI), 0600, in a folder the sandbox shows.
        let root_only = secrets.join("root-only.txt");
        std::fs::write(&root_only, "root-only-secret-0600\n").expect("write");
        std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        // The runner's user's own, 0600.
        let own = secrets.join("own.txt");
        std::fs::write(&own, "the-runners-own-0600\n").expect("write");
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        if let Who::Tester(uid, gid) = who {
            chown_all(&own, uid, gid);
        }
        w.sw(&w.clones[0], &["add", "read"]).ok();
        let out = w.run(&["run", "worker", "--once"], 120);
        let label = who.label();
        assert_eq!(out.code, 0, "{label}: {}", out.stderr);
        let report = w.landed("report.txt");
        assert!(!door(&report, "ssh-key").contains("secret-key-bytes"), "{label}: {report}");
        assert!(!door(&report, "root-only").contains("root-only-secret"), "{label}: {report}");
        assert_eq!(door(&report, "shadow"), "0", "{label}: the agent read /etc/shadow: {report}");
        match who {
            Who::Suite if who.is_root() => {
                assert_eq!(door(&report, "uid"), "65534", "{label}: a root runner's agent is nobody: {report}");
                // The runner's own file is root's here: nobody reads it either.
                assert!(!door(&report, "own").contains("the-runners-own"), "{label}: {report}");
            }
            Who::Suite => {}
            Who::Tester(uid, _) => {
                assert_eq!(door(&report, "uid"), uid.to_string(), "{label}: {report}");
                assert!(door(&report, "own").contains("the-runners-own"), "{label}: what stays readable: {report}");
            }
        }
    }
}

/// **Credentials outside a home.** `CARGO_HOME` and `DOCKER_CONFIG` name folders outside any home (here in the
/// test's folder, readable to every uid as a shared toolchain folder is), holding `credentials.toml` and
/// `config.json` with tokens; a role's `env` passes the variables to the agent, which reads the files. Hiding homes
/// did not hide these. What held: the sandbox blanks the credential files of the tools the runner's environment
/// names, wherever they are (`agent::sandbox::credential_paths`); since issue 37 the run's own `CARGO_HOME` is the
/// swarm's cache besides.
#[test]
fn credential_files_named_by_the_environment_are_blank_wherever_they_are() {
    const AGENT: &str = r#"
say cargo-home "${CARGO_HOME:-unset}"
say cargo "$(cat "$PERSON_CARGO/credentials.toml" "$PERSON_CARGO/credentials" 2>&1 | tr '\n' ' ')"
say docker "$(cat "$DOCKER_CONFIG/config.json" 2>&1 | tr '\n' ' ')"
echo work > work.txt
exit 0
"#;
    let test = "credential_files_named_by_the_environment_are_blank_wherever_they_are";
    for who in attempts(test) {
        let mut w = world(who, AGENT, "", 1, |env, _, clones| {
            let cargo = env.path("cargo-home");
            let docker = env.path("docker-config");
            std::fs::create_dir_all(&cargo).expect("cargo");
            std::fs::create_dir_all(&docker).expect("docker");
            std::fs::write(cargo.join("credentials.toml"), "[registry]\ntoken = \"cio-token-0000\"\n").expect("w");
            std::fs::write(cargo.join("credentials"), "[registry]\ntoken = \"cio-old-token-0000\"\n").expect("w");
            std::fs::write(
                docker.join("config.json"),
                "{\"auths\":{\"r.example\":{\"auth\":\"docker-token-0000\"}}}\n",
            )
            .expect("w");
            env.sw(&clones[0], &["add", "credentials"]).ok();
        });
        let (cargo, docker) = (w.env.path("cargo-home"), w.env.path("docker-config"));
        w.vars.push(("CARGO_HOME".into(), cargo.display().to_string()));
        w.vars.push(("PERSON_CARGO".into(), cargo.display().to_string()));
        w.vars.push(("DOCKER_CONFIG".into(), docker.display().to_string()));
        let out = w.run(&["run", "worker", "--once"], 120);
        let label = who.label();
        assert_eq!(out.code, 0, "{label}: {}", out.stderr);
        let report = w.landed("report.txt");
        // A sandboxed run's CARGO_HOME is the swarm's own cache (issue 37); the person's, read by its path, is blank.
        assert!(door(&report, "cargo-home").ends_with("/caches/cargo"), "{label}: {report}");
        assert_eq!(door(&report, "cargo").trim(), "", "{label}: {report}");
        for token in ["cio-token-0000", "cio-old-token-0000", "docker-token-0000"] {
            assert!(!report.contains(token), "{label}: the agent read {token}: {report}");
        }
        // Blanked means empty (an empty file mounted over each), not an error a tool would stop at.
        assert_eq!(door(&report, "docker").trim(), "", "{label}: {report}");
        // The files are still there for the runner's user.
        assert!(std::fs::read_to_string(cargo.join("credentials.toml")).expect("read").contains("cio-token-0000"));
    }
}

/// The conflict run of [`CONFLICT_WORLD`] replaces the conflicted file with `make` (a FIFO, a link to
/// `/dev/zero`) and exits 0; the runner must end within a bound, and the task too (landed, or failed with a
/// reason).
fn conflicted_file_replaced(test: &str, make: &str) {
    let agent = format!(
        "on_left() {{ :; }}\nin_conflict() {{ rm -f shared.txt; {make}; say replaced \"$(ls -l shared.txt | cut -c1)\"; }}\n{CONFLICT_WORLD}"
    );
    for who in attempts(test) {
        let w = world(who, &agent, "", 2, |_, _, _| {});
        // (Each runner must end within a minute, or `conflict` fails the test.)
        let c = conflict(&w);
        let label = who.label();
        assert!(c.right.stderr.contains("rebase conflict on"), "{label}: no conflict run:\n{}", c.right.stderr);
        assert!(c.right_peak < 256 << 10, "{label}: the runner held {} MiB at once", c.right_peak >> 10);
        assert_eq!(c.left.code, 0, "{label}: {}", c.left.stderr);
        assert_eq!(w.task(&c.left_id)["status"], "done", "{label}");
        // The right task ended: landed, or failed with a reason (then its runner says so and exits 1).
        let t = w.task(&c.right_id);
        let reason = t["failures"][0]["reason"].as_str().unwrap_or_default().to_string();
        let ended = (t["status"] == "done" && c.right.code == 0) || (!reason.is_empty() && c.right.code == 1);
        assert!(ended, "{label}: the task did not end: {t}\n{}", c.right.stderr);
    }
}

/// **A FIFO in place of a conflicted file.** The runner read the conflicted files after the conflict run to tell
/// whether they were resolved: opening the FIFO blocked it for good (its claim held, SIGTERM ignored while it
/// waited). What held: the runner reads what an agent left through `agent::files` (never blocking on a FIFO: a FIFO
/// is not a file git can hold, and is left out and said).
#[test]
fn a_fifo_in_place_of_a_conflicted_file_never_blocks_the_runner() {
    conflicted_file_replaced("a_fifo_in_place_of_a_conflicted_file_never_blocks_the_runner", "mkfifo shared.txt");
}

/// **A link to `/dev/zero` in place of a conflicted file.** The runner's read of the conflicted file followed the
/// link and read `/dev/zero` without bound (here the runner's address space is bounded, so it ends instead of the
/// machine). What held: no link is followed at any component of what the runner reads of a work tree; a link is
/// taken as a link (its target, as git holds it).
#[test]
fn a_link_to_dev_zero_in_place_of_a_conflicted_file_is_taken_as_a_link() {
    conflicted_file_replaced(
        "a_link_to_dev_zero_in_place_of_a_conflicted_file_is_taken_as_a_link",
        "ln -s /dev/zero shared.txt",
    );
}

/// **An object that inflates past any bound** (found while writing these tests, closed with them). The agent
/// leaves in its git directory a loose object of a gibibyte of zeros and a byte, which zlib keeps in about a
/// megabyte. The runner brought every object of the run into the clone by inflating it whole (twice over): a
/// megabyte on disk took two gibibytes of the runner's memory, and the run's budget of copied objects (4 GiB) let
/// an agent ask for terabytes. What held: each object is sized by its header before it is read; one past the
/// 1 GiB a file of the work may be (or objects past 4 GiB in all) fails the run's work with that reason.
#[test]
fn an_object_that_inflates_past_a_file_s_bound_is_refused_by_its_header() {
    const AGENT: &str = r#"
echo work > work.txt
truncate -s 1073741825 zeros.bin
say bomb "$(git hash-object -w zeros.bin)"
rm -f zeros.bin
say on-disk "$(du -sk "$(git rev-parse --git-path objects)" | cut -f1) KiB"
exit 0
"#;
    let test = "an_object_that_inflates_past_a_file_s_bound_is_refused_by_its_header";
    for who in attempts(test) {
        let w = world(who, AGENT, "", 1, |_, _, _| {});
        let id = w.sw(&w.clones[0], &["add", "bomb"]).ok().line();
        let runner = w.spawn(&w.clones[0], "w", &["run", "worker", "--once"]);
        let peak = watch_peak(runner.id());
        let out = common::finish(runner, 120, "the runner");
        let peak = peak.join().expect("the watch");
        let label = who.label();
        println!("--- the runner, {label}, held at most {peak} KiB:\n{}", out.stderr);
        assert!(peak < 256 << 10, "{label}: the runner held {} MiB at once:\n{}", peak >> 10, out.stderr);
        let t = w.task(&id);
        let reason = t["failures"][0]["reason"].as_str().unwrap_or_default().to_string();
        assert!(reason.contains("past the 1024 MiB"), "{label}: {t}\n{}", out.stderr);
        assert_eq!(out.code, 1, "{label}: the task failed, and the runner says so: {}", out.stderr);
    }
}
