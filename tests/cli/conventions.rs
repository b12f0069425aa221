//! At home in git: `git swarm --help` opens the installed manual page, git's own shell completion completes
//! `git swarm <TAB>`, `git config swarm.*` (and `git -c`) configure a clone below flags and the environment, and
//! `-C`, `GIT_DIR` and linked work trees behave as in git. Real git, real man, real bash/zsh/fish.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{BIN, Env, Out, file_url};

/// Is `tool` here? Missing: the test is skipped, or fails under `GIT_SWARM_REQUIRE_ALL=1` (CI installs it).
fn have(tool: &str, test: &str) -> bool {
    let found = if tool.starts_with('/') {
        Path::new(tool).exists()
    } else {
        Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
    };
    if !found {
        assert!(
            !std::env::var("GIT_SWARM_REQUIRE_ALL").is_ok_and(|v| v == "1"),
            "{test}: {tool} is missing and GIT_SWARM_REQUIRE_ALL=1 (.ci/run installs it)"
        );
        eprintln!("{test}: skipped: {tool} is not installed");
    }
    found
}

/// A prefix like `~/.cargo` (`bin/git-swarm` is this build) with `git swarm setup` run into it, and the PATH that
/// puts it first.
fn installed(env: &Env) -> (PathBuf, String) {
    let prefix = env.path("prefix");
    std::fs::create_dir_all(prefix.join("bin")).expect("prefix");
    std::os::unix::fs::symlink(BIN, prefix.join("bin/git-swarm")).expect("symlink");
    let path = format!("{}:{}", prefix.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let o = setup(env, &prefix, &path).ok().json();
    assert!(o["installed"].as_array().is_some_and(|a| a.len() == 4 && a.iter().all(|f| f["changed"] == true)), "{o}");
    (prefix, path)
}

fn setup(env: &Env, prefix: &Path, path: &str) -> Out {
    let mut cmd = env.cmd(env.path("").as_path());
    cmd.env("PATH", path);
    for v in ["XDG_DATA_HOME", "XDG_CONFIG_HOME", "BASH_COMPLETION_USER_DIR"] {
        cmd.env_remove(v);
    }
    Out::from(cmd.args(["setup", "--json", "--prefix"]).arg(prefix).output().expect("setup"))
}

fn repo(env: &Env) -> (PathBuf, PathBuf) {
    let bare = env.bare_remote("origin");
    let c = env.clone(&file_url(&bare), "c0");
    env.sw(&c, &["init"]).ok();
    (bare, c)
}

#[test]
fn git_swarm_help_opens_the_manual_page_that_setup_installed() {
    if !have("man", "git_swarm_help_opens_the_manual_page_that_setup_installed") {
        return;
    }
    let env = Env::new();
    let (_bare, c) = repo(&env);
    let (prefix, path) = installed(&env);
    let page = prefix.join("share/man/man1/git-swarm.1");
    assert!(page.is_file());
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&page).expect("stat").permissions());
    assert_eq!(mode & 0o777, 0o644, "readable by everyone, like any man page");
    for args in [&["swarm", "--help"][..], &["help", "swarm"]] {
        let mut cmd = Command::new("git");
        cmd.current_dir(&c)
            .args(args)
            .env("PATH", &path)
            .env("HOME", env.path("home"))
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .env("MANWIDTH", "120")
            .env_remove("MANPATH");
        let o = Out::from(cmd.output().expect("git help"));
        assert_eq!(o.code, 0, "git {args:?}: {}", o.stderr);
        for want in [
            "GIT-SWARM(1)",
            "COMMANDS",
            "git swarm claim",
            "git swarm run",
            "CONFIGURATION",
            "swarm.roles.<role>.<key>",
            "EXIT STATUS",
        ] {
            assert!(o.stdout.contains(want), "git {args:?} lacks {want:?}:\n{}", o.stdout);
        }
    }
    // A second setup changes nothing.
    let again = setup(&env, &prefix, &path).ok().json();
    assert!(again["installed"].as_array().is_some_and(|a| a.iter().all(|f| f["changed"] == false)), "{again}");
    assert_eq!(again["man_found"], true, "man finds the page through PATH: {again}");
}

/// What bash completes for `line` (the cursor at its end), loading completions as an interactive bash would:
/// bash-completion's loader, git's completion for `git`, ours for `git-swarm`.
fn bash_complete(env: &Env, dir: &Path, path: &str, line: &str) -> Vec<String> {
    let script = r#"
source /usr/share/bash-completion/bash_completion
line="$1"
COMP_LINE="$line"; COMP_POINT=${#line}
read -ra COMP_WORDS <<<"$line"
[[ "$line" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMPREPLY=()
spec=$(complete -p "${COMP_WORDS[0]}" 2>/dev/null) || { _completion_loader "${COMP_WORDS[0]}"; spec=$(complete -p "${COMP_WORDS[0]}"); }
fn=$(sed -E 's/.*-F ([^ ]+).*/\1/' <<<"$spec")
"$fn" "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"#;
    let o = Command::new("bash")
        .current_dir(dir)
        .args(["--norc", "--noprofile", "-c", script, "complete", line])
        .env("PATH", path)
        .env("HOME", env.path("home"))
        .env_remove("XDG_DATA_HOME")
        .env_remove("BASH_COMPLETION_USER_DIR")
        .output()
        .expect("bash");
    let o = Out::from(o);
    assert_eq!(o.code, 0, "{line}: {}", o.stderr);
    o.stdout.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect()
}

#[test]
fn bash_completes_git_swarm_through_git_s_own_completion_and_a_subcommand_s_flags() {
    let test = "bash_completes_git_swarm_through_git_s_own_completion_and_a_subcommand_s_flags";
    if !have("bash", test)
        || !have("/usr/share/bash-completion/bash_completion", test)
        || !have("/usr/share/bash-completion/completions/git", test)
    {
        return;
    }
    let env = Env::new();
    let (_bare, c) = repo(&env);
    let (_prefix, path) = installed(&env);
    for (line, want) in [
        ("git swarm cl", &["claim"][..]),
        ("git swarm claim --le", &["--lease"]),
        ("git -C . swarm do", &["doctor", "done"]),
        ("git swarm run wo", &["worker"]),
        ("git-swarm sta", &["status"]),
        ("git-swarm completions z", &["zsh"]),
    ] {
        let mut got = bash_complete(&env, &c, &path, line);
        if line == "git swarm cl" {
            // git lists git-swarm among its commands (it is on PATH).
            assert!(bash_complete(&env, &c, &path, "git sw").contains(&"swarm".to_string()));
        }
        got.sort();
        got.dedup();
        assert_eq!(got, want, "{line}");
    }
}

#[test]
fn zsh_and_fish_load_the_completions() {
    let env = Env::new();
    let (_bare, c) = repo(&env);
    let (prefix, path) = installed(&env);
    if have("zsh", "zsh_and_fish_load_the_completions") {
        let fpath = prefix.join("share/zsh/site-functions");
        let script = format!(
            "fpath=({} $fpath); autoload -U compinit && compinit -u -d {}/zcompdump; print -r -- ${{_comps[git-swarm]}}",
            fpath.display(),
            env.path("").display()
        );
        let o = Out::from(
            Command::new("zsh").current_dir(&c).args(["-f", "-c", &script]).env("PATH", &path).output().expect("zsh"),
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert_eq!(o.stdout.trim(), "_git-swarm", "git's _git calls _git-swarm for `git swarm`: {}", o.stderr);
        let syntax = Command::new("zsh").arg("-n").arg(fpath.join("_git-swarm")).status().expect("zsh -n");
        assert!(syntax.success());
    }
    if have("fish", "zsh_and_fish_load_the_completions") {
        let comp = env.path("home/.config/fish/completions");
        let o = Out::from(
            Command::new("fish")
                .current_dir(&c)
                .args(["--no-config", "-c"])
                .arg(format!("set -p fish_complete_path {}; complete -C 'git-swarm do'", comp.display()))
                .env("PATH", &path)
                .env("HOME", env.path("home"))
                .output()
                .expect("fish"),
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
        let words: Vec<&str> = o.stdout.lines().filter_map(|l| l.split('\t').next()).collect();
        assert_eq!(words, ["doctor", "done"], "{}", o.stdout);
    }
}

/// Real git (so `git swarm` is found on `path`), in the test's hermetic environment.
fn env_git(env: &Env, dir: &Path, path: &str, args: &[&str]) -> Out {
    let mut cmd = env.command("git");
    cmd.current_dir(dir).args(args).env("PATH", path);
    Out::from(cmd.output().expect("git"))
}

fn holder(env: &Env, c: &Path, id: &str) -> String {
    env.sw(c, &["show", id, "--json"]).ok().json()["claim"]["agent"].as_str().unwrap_or_default().to_string()
}

#[test]
fn the_agent_comes_from_the_flag_then_the_environment_then_git_config_then_git_c() {
    let env = Env::new();
    let (_bare, c) = repo(&env);
    env.git(&c, &["config", "swarm.agent", "from-config"]);
    let a = env.sw(&c, &["add", "a"]).ok().line();
    let b = env.sw(&c, &["add", "b"]).ok().line();
    let d = env.sw(&c, &["add", "d"]).ok().line();
    let e = env.sw(&c, &["add", "e"]).ok().line();
    env.sw(&c, &["claim", &a]).ok();
    assert_eq!(holder(&env, &c, &a), "from-config");
    env.sw_env(&c, &[("GIT_SWARM_AGENT", "from-env")], &["claim", &b]).ok();
    assert_eq!(holder(&env, &c, &b), "from-env");
    env.sw_env(&c, &[("GIT_SWARM_AGENT", "from-env")], &["--agent", "from-flag", "claim", &d]).ok();
    assert_eq!(holder(&env, &c, &d), "from-flag");
    // An empty or non-UTF-8 $GIT_SWARM_AGENT is unset (git config speaks); an empty --agent is refused.
    env.sw_env(&c, &[("GIT_SWARM_AGENT", "")], &["renew", &a]).ok();
    let garbled = std::ffi::OsStr::from_bytes(b"w\xff");
    Out::from(env.cmd(&c).env("GIT_SWARM_AGENT", garbled).args(["renew", &a]).output().expect("run git-swarm")).ok();
    let o = env.sw(&c, &["--agent", "", "status"]).code(2);
    assert!(o.stderr.contains("--agent"), "{}", o.stderr);
    // `git -c swarm.agent=… swarm` (git hands it over in $GIT_CONFIG_PARAMETERS) wins over the repository's config,
    // through real git, with a valueless `-c` before it (git writes that one as `'key'=`).
    let (_prefix, path) = installed(&env);
    let o = env_git(&env, &c, &path, &["-c", "core.quotePath", "-c", "swarm.agent=from-dash-c", "swarm", "claim", &e]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.line(), e);
    assert_eq!(holder(&env, &c, &e), "from-dash-c");
    // A bad id from git config is a usage error naming it.
    env.git(&c, &["config", "swarm.agent", "no spaces"]);
    let o = env.sw(&c, &["status"]).code(2);
    assert!(o.stderr.contains("--agent") && o.stderr.contains("no spaces"), "{}", o.stderr);
}

#[test]
fn git_config_overrides_swarm_toml_for_this_clone_s_runners_only() {
    let env = Env::new();
    let bare = env.bare_remote("origin");
    let c0 = env.clone(&file_url(&bare), "c0");
    let c1 = env.clone(&file_url(&bare), "c1");
    let cfg = env.path("swarm.toml");
    let agent = format!("sh '{}/tests/agents/scripted.sh'", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(&cfg, format!("max_attempts = 3\n[run]\ncheck = \"false\"\n[roles.worker]\nexec = {agent:?}\n"))
        .expect("config");
    env.sw(&c0, &["init", "--config", cfg.to_str().expect("utf-8")]).ok();
    let id = env.sw(&c0, &["add", "write it", "--body", "@write out.txt hello"]).ok().line();
    // c1 runs with swarm.toml's check, which fails: the task is open again (and `--once` says it did not land).
    env.sw(&c1, &["--agent", "w1", "run", "worker", "--once"]).code(1);
    let t = env.sw(&c1, &["show", &id, "--json"]).ok().json();
    assert_eq!(t["status"], "open", "{t}");
    assert_eq!(t["attempts"], 1, "{t}");
    // c0 overrides the check for itself (any spelling git allows): the same task lands.
    env.git(&c0, &["config", "swarm.run.check", "test -f out.txt"]);
    env.git(&c0, &["config", "swarm.run.task-timeout", "5m"]);
    env.sw(&c0, &["--agent", "w0", "run", "worker", "--once"]).ok();
    assert_eq!(env.sw(&c0, &["show", &id, "--json"]).ok().json()["status"], "done");
    assert_eq!(env.git(&bare, &["show", "main:out.txt"]), "hello");
    // swarm.toml itself did not change.
    let shared = env.git(&bare, &["show", "refs/swarm/default:swarm.toml"]);
    assert!(shared.contains("check = \"false\""), "{shared}");
    // A typo is a usage error naming the key for the runner; other commands still work.
    env.git(&c0, &["config", "swarm.run.chek", "make"]);
    let o = env.sw(&c0, &["--agent", "w0", "run", "worker", "--once"]).code(2);
    assert!(o.stderr.contains("git config swarm.run.chek") && o.stderr.contains("check"), "{}", o.stderr);
    env.sw(&c0, &["status"]).ok();
    // A bad value there is named as this clone's git config, not as swarm.toml's, before any claim.
    env.git(&c0, &["config", "--unset", "swarm.run.chek"]);
    env.git(&c0, &["config", "swarm.run.checkPolicy", "bogus"]);
    let id2 = env.sw(&c0, &["add", "another"]).ok().line();
    let o = env.sw(&c0, &["--agent", "w0", "run", "worker", "--once"]).code(1);
    assert!(
        o.stderr.contains("this clone's git config") && o.stderr.contains("check_policy = 'bogus'"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("swarm.toml: [run]"), "{}", o.stderr);
    assert_eq!(env.sw(&c0, &["show", &id2, "--json"]).ok().json()["status"], "open", "nothing claimed");
}

#[test]
fn dash_c_git_dir_and_linked_work_trees_behave_as_in_git() {
    let env = Env::new();
    let (bare, c) = repo(&env);
    let id = env.sw(&c, &["add", "shared"]).ok().line();
    std::fs::create_dir_all(c.join("sub/deeper")).expect("dirs");
    let root = env.path("");
    let list = |dir: &Path, args: &[&str]| -> Vec<String> {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["list", "--json"]);
        let v = env.sw(dir, &all).ok().json();
        v.as_array().into_iter().flatten().filter_map(|t| t["id"].as_str().map(String::from)).collect()
    };
    // Several -C combine, each relative to the one before; an empty one changes nothing.
    assert_eq!(list(&root, &["-C", "c0", "-C", "sub", "-C", "", "-C", "deeper"]), std::slice::from_ref(&id));
    let o = env.sw(&root, &["-C", "c0", "-C", "nope", "list"]).code(2);
    assert!(o.stderr.contains("nope"), "{}", o.stderr);
    // GIT_DIR from anywhere, as git; a relative one after -C means the one there.
    let o = env.sw_env(&root, &[("GIT_DIR", c.join(".git").to_str().expect("utf-8"))], &["list", "--json"]).ok();
    assert!(o.stdout.contains(&id), "{}", o.stdout);
    let o = env.sw_env(&root, &[("GIT_DIR", ".git")], &["-C", "c0", "list", "--json"]).ok();
    assert!(o.stdout.contains(&id), "{}", o.stdout);
    // A linked work tree is the same clone: what a claim records there (the epoch) serves `done` in the main one.
    let wt = env.path("wt");
    env.git(&c, &["worktree", "add", "-q", wt.to_str().expect("utf-8"), "-b", "side"]);
    assert_eq!(list(&wt, &[]), std::slice::from_ref(&id));
    env.sw(&wt, &["--agent", "a1", "claim", &id]).ok();
    env.sw(&c, &["--agent", "a1", "done", &id]).ok();
    assert_eq!(env.sw(&wt, &["show", &id, "--json"]).ok().json()["status"], "done");
    // --remote takes a URL or a path, as git's remotes do; the default is origin.
    let other = env.path("other");
    env.git(&root, &["init", "-q", other.to_str().expect("utf-8")]);
    let url = file_url(&bare);
    assert_eq!(list(&other, &["--remote", &url]), std::slice::from_ref(&id));
    assert_eq!(list(&other, &["--remote", bare.to_str().expect("utf-8")]), std::slice::from_ref(&id));
    env.git(&other, &["config", "swarm.remote", &url]);
    assert_eq!(list(&other, &[]), [id]);
    // -C runs there: a relative file argument is read there.
    std::fs::write(c.join("body.txt"), "from the file in c0\n").expect("write");
    let other_id = env.sw(&root, &["-C", "c0", "add", "with a body", "--body-file", "body.txt"]).ok().line();
    let t = env.sw(&c, &["show", &other_id, "--json"]).ok().json();
    assert!(t["body"].as_str().is_some_and(|b| b.contains("from the file in c0")), "{t}");
}

#[test]
fn config_changes_the_shared_settings_by_compare_and_swap() {
    let env = Env::new();
    let (bare, c0) = repo(&env);
    let c1 = env.clone(&file_url(&bare), "c1");
    let state = |env: &Env| env.rev(&bare, "refs/swarm/default").expect("state ref");
    let o = env.sw(&c0, &["config", "set", "lease", "30m", "--json"]).ok().json();
    assert_eq!((o["previous"].as_str(), o["value"].as_str()), (Some("10m"), Some("30m")), "{o}");
    // Every clone reads it from the ref.
    assert_eq!(env.sw(&c1, &["config", "get", "lease"]).ok().line(), "30m");
    assert_eq!(env.sw(&c1, &["status", "--json"]).ok().json()["lease"], "30m");
    // The same value again, and refused values: no push, the culprit named.
    let before = state(&env);
    env.sw(&c1, &["config", "set", "lease", "30m"]).ok();
    for (key, value, culprit) in [
        ("lease", "soon", "lease"),
        ("leese", "5m", "leese"),
        ("run.chek", "make", "chek"),
        ("roles.worker.preset", "nobody", "nobody"),
        ("run.pushes_per_minute", "0", "pushes_per_minute"),
    ] {
        let o = env.sw(&c1, &["config", "set", key, value]).code(2);
        assert!(o.stderr.contains(culprit), "{key}: {}", o.stderr);
    }
    assert_eq!(state(&env), before, "nothing was pushed");
    // Two clones setting different keys at once: both land (a lost race re-applies the edit to the newest settings).
    let spawn =
        |dir: &Path, key: &str, value: &str| env.cmd(dir).args(["config", "set", key, value]).spawn().expect("spawn");
    let mut a = spawn(&c0, "run.pushes_per_minute", "6");
    let mut b = spawn(&c1, "run.check", "cargo test --quiet");
    assert!(a.wait().expect("wait").success() && b.wait().expect("wait").success());
    let all = env.sw(&c0, &["config", "--json"]).ok().json();
    assert_eq!(all["run"]["pushes_per_minute"], 6, "{all}");
    assert_eq!(all["run"]["check"], "cargo test --quiet", "{all}");
    assert_eq!(all["lease"], "30m", "{all}");
    // Unset, get of a missing key, and the log.
    env.sw(&c0, &["config", "unset", "run.check"]).ok();
    env.sw(&c0, &["config", "get", "run.check"]).code(1);
    let log = env.sw(&c0, &["log", "--json"]).ok().json();
    let configs = log.as_array().into_iter().flatten().filter(|e| e["op"] == "config").count();
    assert_eq!(configs, 4, "lease, two sets at once, one unset: {log}");
}
