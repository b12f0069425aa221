//! The GitLab CI pipeline of a fleet, generated from [`Options`]: pure text generation, no I/O.
//!
//! Shape (see `docs/gitlab-ci.md` for why):
//!
//! * One file, two pipelines. A pipeline started through the API, a trigger token, a schedule or the web runs the
//!   job `git-swarm` alone: a trigger job that starts the fleet as a **child pipeline of this same file**
//!   (`trigger: include: local`, `strategy: depend`), holding the resource group `git-swarm-<swarm>` until the
//!   child ends: one fleet per swarm at a time (GitLab's pipeline-level concurrency control). In the child
//!   (`CI_PIPELINE_SOURCE == "parent_pipeline"`) the fleet's jobs run and the trigger job does not. Push pipelines
//!   run nothing of it (the swarm's own pushes to the target branch also carry the push option `ci.skip`).
//! * No `stages:` key: the jobs use GitLab's default stages (`build` for prepare, `test` for the rest), so that the
//!   file can be included by a project's own `.gitlab-ci.yml` without changing its stages.
//! * Job `prepare`: git-swarm from the cache (`cache:key` names the version and the commit), else built
//!   ([`install::Source`], by default `cargo install --git` of the commit that wrote the file) with no secret in the
//!   build's environment; the push credential; `git fetch` of `refs/swarm/*`; `git swarm init`.
//! * Job `worker` (`parallel: N`): the cache (pull only), the agents' CLIs at their tested releases, bubblewrap and
//!   `swarm.run.sandbox`, the swarm's refs and a git identity, the setup commands, the push credential, then
//!   `git swarm run worker --until-idle` as agent `gl-<job id>-w<n>`. Optional `planner` and `judge` jobs the same
//!   way.
//! * The push credential: `SWARM_PUSH_TOKEN` (a masked CI/CD variable: a project access token or a deploy token;
//!   `CI_JOB_TOKEN` cannot push) becomes the remote's push URL through git's configuration in the runner's
//!   environment (`GIT_CONFIG_COUNT`/`_KEY_n`/`_VALUE_n`), never `.git/config`; agents get an allow-list of the
//!   environment, in a sandbox that shows them neither it nor the runner's processes.
//!
//! Everything that comes from the user is validated or placed where YAML and the shell take it as data: numbers
//! and names are checked against narrow character sets; commands (`--install`, `--setup`) go into literal block
//! scalars; the dispatch's variables reach scripts only as environment variables, quoted.

use std::fmt::Write as _;

use crate::fleet::install::{self, Source};
use crate::fleet::runner_command;

/// The most jobs `parallel` makes (GitLab's limit).
pub(crate) const MAX_WORKERS: u32 = 200;
/// The longest `timeout` we write: 72 hours (a runner's own limit may be lower).
pub(crate) const MAX_TIMEOUT_MINUTES: u32 = 72 * 60;
/// The most agents one worker job hosts (as `run worker --agents`).
pub(crate) const MAX_AGENTS_PER_JOB: u32 = 512;
/// The agents' keys when none are named: CI/CD variables kept out of the builds, installs and setup commands.
pub(crate) const DEFAULT_SECRETS: &[&str] = &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"];
/// The CI/CD variable that holds the push credential.
pub(crate) const PUSH_TOKEN: &str = "SWARM_PUSH_TOKEN";
/// Where the jobs keep the git-swarm binary: under the project directory, where `cache:paths` can reach it.
const BIN_DIR: &str = ".git-swarm/bin";

/// What the pipeline does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    /// Worker jobs (`parallel`): the most a dispatch can start; `SWARM_WORKERS` picks fewer.
    pub workers: u32,
    /// Agents in each worker job (`git swarm run worker --agents <n>`).
    pub agents_per_job: u32,
    /// Add a planner job (`SWARM_GOAL` gives it a goal).
    pub planner: bool,
    /// Add a judge job.
    pub judge: bool,
    /// The swarm the jobs work (`GIT_SWARM_SWARM`, the resource group's name).
    pub swarm: String,
    /// Where a job installs git-swarm from on a cache miss.
    pub install: Source,
    /// The version of git-swarm that writes the file (its header and the cache key name it).
    pub version: String,
    /// Commands that install the agents' CLIs ([`install::agent_cli`]).
    pub agent_clis: Vec<String>,
    /// `timeout` of the runner jobs, in minutes.
    pub timeout_minutes: u32,
    /// `image` of the worker, planner and judge jobs (None: no `image`, the runner's default or a shell executor).
    pub image: Option<String>,
    /// `image` of the prepare job, which builds git-swarm (None: `image`).
    pub build_image: Option<String>,
    /// `tags` of every job (which runners take them).
    pub tags: Vec<String>,
    /// CI/CD variables the agents use (their keys): kept out of the builds, installs and setup commands.
    pub secrets: Vec<String>,
    /// Shell commands run before the runner in each runner job (a toolchain, the project's dependencies, …).
    pub setup: Vec<String>,
    /// The command line that regenerates this file (for the header comment).
    pub regenerate: String,
    /// The GitLab environment of the jobs that run agents (`environment: {name, action: access}`): CI/CD variables
    /// scoped to it reach those jobs only.
    pub environment: Option<String>,
    /// The digest of the shared settings the fleet may run (`git swarm trust --digest`), pinned as
    /// `GIT_SWARM_TRUST` of every runner job.
    pub trust: Option<String>,
    /// The path of this file in the repository: the trigger job includes it as the child pipeline.
    pub path: String,
    /// Included by a project's own `.gitlab-ci.yml`: the trigger job also needs `SWARM_FLEET == "1"` (a project's
    /// own schedules and API pipelines do not start a fleet).
    pub include: bool,
    /// `[run] sandbox` of the runner jobs' clones (`required`: no agent runs uncontained; `auto`).
    pub sandbox: String,
}

impl Options {
    /// The defaults of `git swarm ci gitlab`: git-swarm installed as `Source::default_for` this binary.
    pub(crate) fn new(workers: u32) -> Options {
        let build = install::Build::this();
        let version = build.version.clone();
        Options {
            workers,
            agents_per_job: 1,
            planner: false,
            judge: false,
            swarm: "default".into(),
            install: Source::default_for(&build).unwrap_or(Source::CratesIo { version: version.clone() }),
            version,
            agent_clis: Vec::new(),
            timeout_minutes: 120,
            image: Some("node:22-bookworm".into()),
            build_image: Some("rust:1-bookworm".into()),
            tags: Vec::new(),
            secrets: DEFAULT_SECRETS.iter().map(|s| s.to_string()).collect(),
            setup: Vec::new(),
            regenerate: format!("git swarm ci gitlab --workers {workers} --force"),
            environment: None,
            trust: None,
            path: super::CI_FILE.into(),
            include: false,
            sandbox: "required".into(),
        }
    }
}

/// An option that cannot go into the file, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option}: {message}")]
pub(crate) struct OptionError {
    pub option: &'static str,
    pub message: String,
}

fn bad(option: &'static str, message: impl Into<String>) -> OptionError {
    OptionError { option, message: message.into() }
}

/// A word of narrow characters (an image, a tag, an environment, a path): what YAML and GitLab take as they are.
fn plain(s: &str, max: usize, extra: &str) -> bool {
    !s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
}

/// Check every option; the error names the flag.
pub(crate) fn validate(o: &Options) -> Result<(), OptionError> {
    if o.workers == 0 || o.workers > MAX_WORKERS {
        return Err(bad(
            "--workers",
            format!("{} is not between 1 and {MAX_WORKERS} (GitLab's `parallel` limit)", o.workers),
        ));
    }
    if o.agents_per_job == 0 || o.agents_per_job > MAX_AGENTS_PER_JOB {
        return Err(bad("--agents-per-job", format!("{} is not between 1 and {MAX_AGENTS_PER_JOB}", o.agents_per_job)));
    }
    if o.timeout_minutes == 0 || o.timeout_minutes > MAX_TIMEOUT_MINUTES {
        return Err(bad(
            "--timeout",
            format!("{} minutes is not between 1 and {MAX_TIMEOUT_MINUTES}", o.timeout_minutes),
        ));
    }
    crate::model::validate_swarm_name(&o.swarm).map_err(|m| bad("--swarm", m))?;
    for (option, image) in [("--image", &o.image), ("--build-image", &o.build_image)] {
        if let Some(i) = image
            && !plain(i, 255, "-_./:@")
        {
            return Err(bad(option, format!("'{}' is not an image name", crate::escape::line(i))));
        }
    }
    if o.tags.len() >= 50 {
        return Err(bad("--tag", "GitLab takes fewer than 50 tags"));
    }
    if let Some(t) = o.tags.iter().find(|t| !plain(t, 255, "-_.:/")) {
        return Err(bad(
            "--tag",
            format!("'{}' is not a runner tag (letters, digits, '-', '_', '.', ':', '/')", crate::escape::line(t)),
        ));
    }
    if let Some(e) = &o.environment
        && (!plain(e, 255, "-_./") || e.starts_with('/') || e.ends_with('/'))
    {
        return Err(bad(
            "--environment",
            format!("'{}' is not an environment name (letters, digits, '-', '_', '.', '/')", crate::escape::line(e)),
        ));
    }
    for s in &o.secrets {
        let upper = s.to_ascii_uppercase();
        let ok = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && plain(s, 100, "_")
            && !["CI_", "GITLAB_", "GIT_SWARM_"].iter().any(|p| upper.starts_with(p))
            && s != PUSH_TOKEN;
        if !ok {
            return Err(bad(
                "--secret",
                format!(
                    "'{}' is not a variable name for the agents (letters, digits and '_', not starting with a digit, \
                     CI_, GITLAB_ or GIT_SWARM_, and not {PUSH_TOKEN}, the runners' own)",
                    crate::escape::line(s)
                ),
            ));
        }
    }
    if !plain(&o.path, 255, "-_./")
        || o.path.starts_with('/')
        || o.path.contains("..")
        || !(o.path.ends_with(".yml") || o.path.ends_with(".yaml"))
    {
        return Err(bad(
            "--file",
            format!("'{}' is not a path of a YAML file in the repository", crate::escape::line(&o.path)),
        ));
    }
    if !matches!(o.sandbox.as_str(), "required" | "auto") {
        return Err(bad("--sandbox", format!("'{}' is neither required nor auto", crate::escape::line(&o.sandbox))));
    }
    o.install.validate().map_err(|m| bad("--install", m))?;
    for s in &o.agent_clis {
        install::check_command(s).map_err(|m| bad("--agent-cli", m))?;
    }
    for s in &o.setup {
        install::check_command(s).map_err(|m| bad("--setup", m))?;
    }
    install::check_version(&o.version).map_err(|m| bad("version", m))?;
    Ok(())
}

/// `text` as the lines of a literal block scalar item of a `script:` list (`- |`), indented for a job's script.
fn script_item(out: &mut String, text: &str) {
    out.push_str("    - |\n");
    for line in text.trim_end().lines() {
        if line.trim().is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "      {}", line.trim_end());
        }
    }
}

/// `cmd` (a user's command, several lines maybe) indented by `pad` inside a script of ours.
fn indented(cmd: &str, pad: &str) -> String {
    cmd.trim()
        .lines()
        .map(|l| if l.trim().is_empty() { String::new() } else { format!("{pad}{}", l.trim_end()) })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `unset` of every secret: the first line of a subshell that runs what must not read them.
fn unset_secrets(o: &Options) -> String {
    let mut names = vec![PUSH_TOKEN.to_string()];
    names.extend(o.secrets.iter().cloned());
    format!("unset {}", names.join(" "))
}

/// A subshell that runs `body` without the secrets in its environment.
fn without_secrets(o: &Options, body: &str) -> String {
    format!("(\n  {}\n{}\n)", unset_secrets(o), indented(body, "  "))
}

/// The cache of the binary: one key per version and install (the commit, the command), shared by the whole fleet.
fn cache_key(o: &Options) -> String {
    format!("git-swarm-{}-{}", o.version, o.install.cache_id())
}

/// git-swarm from the cache, else installed (with no secret in the build's environment: cargo runs the build
/// scripts of crates), and on the PATH.
fn install_item(out: &mut String, o: &Options, can_build: bool) {
    let mut body = String::new();
    if !can_build && matches!(o.install, Source::Git { .. } | Source::CratesIo { .. }) {
        // A runner job's image has no Rust toolchain: say why, instead of cargo's "not found".
        let _ = write!(
            body,
            "if ! command -v cargo >/dev/null 2>&1; then\n\
             \x20 echo \"git-swarm is not in the cache ({key}) and this image has no cargo to build it: the fleet's runners \
             must share a cache (docs/gitlab-ci.md, *The cache*), or --image must have a Rust toolchain\"\n\
             \x20 exit 1\n\
             fi\n",
            key = cache_key(o)
        );
    }
    body.push_str(&o.install.command());
    script_item(
        out,
        &format!(
            "# git-swarm from the cache, else built here ({BIN_DIR}/, which the cache keeps). The build runs without the\n\
             # agents' keys and the push token in its environment: cargo runs the build scripts of crates.\n\
             if [ ! -x \"$CI_PROJECT_DIR/{BIN_DIR}/git-swarm\" ]; then\n\
             {}\n\
             fi\n\
             export PATH=\"$CI_PROJECT_DIR/{BIN_DIR}:$PATH\"\n\
             git swarm --version",
            indented(
                &without_secrets(o, &format!("export CARGO_INSTALL_ROOT=\"$CI_PROJECT_DIR/.git-swarm\"\n{body}")),
                "  "
            )
        ),
    );
}

/// The agents' CLIs at the releases git-swarm is tested with (npm and pipx run the packages' install scripts: no
/// secret in their environment).
fn agent_cli_item(out: &mut String, o: &Options) {
    if o.agent_clis.is_empty() {
        return;
    }
    let mut body = String::new();
    if o.agent_clis.iter().any(|c| c.starts_with("pipx ")) {
        body.push_str("command -v pipx >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq pipx; }\n");
    }
    body.push_str(&o.agent_clis.join("\n"));
    let mut text = format!(
        "# The agents' CLIs, at the releases git-swarm's presets are tested with.\n{}",
        without_secrets(o, &body)
    );
    if o.agent_clis.iter().any(|c| c.starts_with("pipx ")) {
        text.push_str("\nexport PATH=\"$HOME/.local/bin:$PATH\"");
    }
    script_item(out, &text);
}

/// The sandbox of the agents: bubblewrap installed when missing, and the clone's `[run] sandbox`.
fn sandbox_item(out: &mut String, o: &Options) {
    let install = "apt-get update -qq && apt-get install -y -qq bubblewrap";
    let or_not = if o.sandbox == "required" { "" } else { " || true" };
    let get = format!("command -v bwrap >/dev/null 2>&1 || {}{or_not}", without_secrets(o, install));
    script_item(
        out,
        &format!(
            "# Every agent runs in a sandbox (docs/security.md, *Containment*): it sees neither this job's environment\n\
             # nor its processes, where the push credential is. `required`: no agent runs without one.\n\
             {get}\n\
             git config swarm.run.sandbox {}",
            o.sandbox
        ),
    );
}

/// The swarm's refs (the checkout fetches branches and tags only) and the identity of the runners' commits.
fn refs_item(out: &mut String) {
    script_item(
        out,
        "# The swarm's refs (the checkout fetches branches and tags only), and who the runners' commits are by.\n\
         git fetch --no-tags \"$GIT_SWARM_REMOTE\" '+refs/swarm/*:refs/swarm/*'\n\
         git config user.name 'git-swarm'\n\
         git config user.email \"git-swarm@noreply.$CI_SERVER_HOST\"",
    );
}

/// The setup commands, each in a subshell without the secrets: an `export` or `. venv/bin/activate` there is lost
/// to the runner, so a setup that changes the environment says so in two files, as GitHub's `$GITHUB_PATH` and
/// `$GITHUB_ENV` do — a folder a line in `$GIT_SWARM_PATH`, `NAME=value` a line in `$GIT_SWARM_ENV` — which this
/// job's shell takes after each command (read as data, never run).
fn setup_items(out: &mut String, o: &Options) {
    if o.setup.is_empty() {
        return;
    }
    script_item(
        out,
        "# What the setup commands add to the runner's PATH and environment (docs/gitlab-ci.md, *Setup*).\n\
         GIT_SWARM_PATH=$(mktemp) && GIT_SWARM_ENV=$(mktemp) && export GIT_SWARM_PATH GIT_SWARM_ENV",
    );
    for (i, cmd) in o.setup.iter().enumerate() {
        script_item(out, &format!("# Setup {} (without the secrets).\n{}", i + 1, without_secrets(o, cmd)));
        script_item(
            out,
            &format!(
                "# What setup {} added to PATH and the environment.\n\
                 while IFS= read -r dir; do [ -n \"$dir\" ] && PATH=\"$dir:$PATH\"; done < \"$GIT_SWARM_PATH\"\n\
                 while IFS= read -r kv; do case \"$kv\" in [A-Za-z_]*=*) export \"$kv\" ;; esac; done < \"$GIT_SWARM_ENV\"\n\
                 export PATH; : > \"$GIT_SWARM_PATH\"; : > \"$GIT_SWARM_ENV\"",
                i + 1
            ),
        );
    }
}

/// The push credential, as the remote's push URL in git's configuration from this shell's environment.
fn push_credential_item(out: &mut String) {
    script_item(
        out,
        &format!(
            "# The push credential (docs/gitlab-ci.md, *Credentials*): {PUSH_TOKEN}, a masked CI/CD variable holding a\n\
             # project access token (or a deploy token, with SWARM_PUSH_USER) with write_repository: CI_JOB_TOKEN cannot\n\
             # push. It becomes the remote's push URL in git's configuration from this shell's environment (`git -c`'s\n\
             # GIT_CONFIG_PARAMETERS; never .git/config), which the runner's own `git push` reads and no agent gets.\n\
             # Pushes carry `ci.skip`: the swarm's landings start no pipeline.\n\
             if [ -z \"${{{PUSH_TOKEN}:-}}\" ]; then\n\
             \x20 echo \"{PUSH_TOKEN} is not set: add a masked CI/CD variable with a token that may push (docs/gitlab-ci.md)\"\n\
             \x20 exit 1\n\
             fi\n\
             case \"${PUSH_TOKEN}\" in\n\
             \x20 *[!A-Za-z0-9._~-]*) echo \"{PUSH_TOKEN} holds a character a URL cannot carry (not a GitLab token?)\"; exit 1 ;;\n\
             esac\n\
             case \"${{SWARM_PUSH_USER:-oauth2}}\" in\n\
             \x20 *[!A-Za-z0-9._~+-]*) echo \"SWARM_PUSH_USER holds a character a URL cannot carry\"; exit 1 ;;\n\
             esac\n\
             repo_url=\"$CI_SERVER_URL/$CI_PROJECT_PATH.git\"\n\
             push_url=\"${{repo_url%%://*}}://${{SWARM_PUSH_USER:-oauth2}}:${{{PUSH_TOKEN}}}@${{repo_url#*://}}\"\n\
             export GIT_CONFIG_PARAMETERS=\"${{GIT_CONFIG_PARAMETERS:+$GIT_CONFIG_PARAMETERS }}'remote.$GIT_SWARM_REMOTE.pushurl'='$push_url' 'push.pushoption'='ci.skip'\""
        ),
    );
}

/// `--until-idle` ends a runner on an empty board: wait for the planner to file the goal first.
fn wait_item(out: &mut String) {
    script_item(
        out,
        "# Wait until the board has a task (the planner files the goal): `--until-idle` ends on an empty board.\n\
         for _ in $(seq 1 30); do\n\
         \x20 if [ -n \"$(git swarm list 2>/dev/null)\" ]; then break; fi\n\
         \x20 sleep 10\n\
         done",
    );
}

/// The pipeline file for `o`, after [`validate`]: its sections in order.
pub(crate) fn render(o: &Options) -> Result<String, OptionError> {
    validate(o)?;
    let mut out = String::new();
    for section in [head_section, trigger_section, template_section, prepare_section, runner_section, roles_section] {
        section(&mut out, o);
    }
    Ok(out)
}

/// The file's head: what made it and how it runs.
fn head_section(out: &mut String, o: &Options) {
    let w = o.workers;
    let _ = write!(
        out,
        "# Generated by `git swarm ci gitlab` (git-swarm {version}). Regenerate it with\n\
         #   {regenerate}\n\
         # or edit it by hand (and then do not regenerate). How it works: docs/gitlab-ci.md of git-swarm.\n\
         #\n\
         # A pipeline started through the API (`git swarm dispatch --gitlab`), a trigger, a schedule or the web runs the\n\
         # job `git-swarm`, which starts the fleet as a child pipeline of this same file, one fleet per swarm at a time\n\
         # (its resource group). Push pipelines run none of it. The pipeline's variables: SWARM_WORKERS (how many of the\n\
         # {w} worker jobs work, default all), SWARM_GOAL (the planner's goal), SWARM_FLEET=1 (needed by an include).\n",
        version = o.version,
        regenerate = o.regenerate.replace('\n', " "),
    );
}

/// The trigger job: the fleet as a child pipeline of this file, one fleet per swarm at a time.
fn trigger_section(out: &mut String, o: &Options) {
    let sources = "$CI_PIPELINE_SOURCE == \"api\" || $CI_PIPELINE_SOURCE == \"trigger\" || \
                   $CI_PIPELINE_SOURCE == \"web\" || $CI_PIPELINE_SOURCE == \"schedule\"";
    let rule = if o.include { format!("$SWARM_FLEET == \"1\" && ({sources})") } else { sources.to_string() };
    let _ = write!(
        out,
        "\n\
         # The fleet, as a child pipeline of this file. The resource group holds while the child runs: a second start\n\
         # waits for the running fleet instead of joining it. Only the dispatch's variables go down (its own YAML\n\
         # variables the child reads from this file).\n\
         git-swarm:\n\
         \x20 stage: test\n\
         \x20 needs: []\n\
         \x20 rules:\n\
         \x20   - if: '{rule}'\n\
         \x20 resource_group: git-swarm-{swarm}\n\
         \x20 trigger:\n\
         \x20   include:\n\
         \x20     - local: {path}\n\
         \x20   strategy: depend\n\
         \x20   forward:\n\
         \x20     yaml_variables: false\n\
         \x20     pipeline_variables: true\n",
        rule = rule,
        swarm = o.swarm,
        path = o.path,
    );
}

/// The template every job of the fleet extends: its rules, tags, variables and the binary's cache.
fn template_section(out: &mut String, o: &Options) {
    // The template of every job of the fleet.
    let _ = write!(
        out,
        "\n\
         # What every job of the fleet shares. Not interruptible: a newer pipeline never cancels agents mid-task.\n\
         .git-swarm-job:\n\
         \x20 rules:\n\
         \x20   - if: '$CI_PIPELINE_SOURCE == \"parent_pipeline\"'\n\
         \x20 interruptible: false\n"
    );
    if !o.tags.is_empty() {
        let _ = writeln!(out, "  tags: [{}]", o.tags.join(", "));
    }
    let _ = write!(
        out,
        "  variables:\n\
         \x20   # Full history: workers rebase on the target branch.\n\
         \x20   GIT_DEPTH: \"0\"\n\
         \x20   GIT_SWARM_REMOTE: origin\n\
         \x20   GIT_SWARM_SWARM: {swarm}\n",
        swarm = o.swarm
    );
    if let Some(d) = &o.trust {
        // Only hex reaches the file; a change of the shared settings needs this file regenerated (and reviewed).
        let d: String = d.chars().filter(char::is_ascii_hexdigit).collect();
        let _ = writeln!(out, "    GIT_SWARM_TRUST: {d}");
    }
    let _ = write!(
        out,
        "  cache:\n\
         \x20   key: {key}\n\
         \x20   paths:\n\
         \x20     - {BIN_DIR}/\n\
         \x20   policy: pull\n",
        key = cache_key(o)
    );
}

/// `prepare`: no agent, so no environment; the image that builds git-swarm, fills the cache, creates the swarm.
fn prepare_section(out: &mut String, o: &Options) {
    let w = o.workers;
    // prepare: no agent, so no environment; the image that builds git-swarm.
    out.push_str("\nprepare:\n  extends: .git-swarm-job\n  stage: build\n");
    if let Some(i) = o.build_image.as_ref().or(o.image.as_ref()) {
        let _ = writeln!(out, "  image: {i}");
    }
    let _ = writeln!(out, "  timeout: {} minutes", o.timeout_minutes.min(60));
    out.push_str("  cache:\n    policy: pull-push\n  script:\n");
    script_item(
        out,
        &format!(
            "# SWARM_WORKERS: a whole number from 1 to {w} (the jobs past it end at once).\n\
             case \"${{SWARM_WORKERS:-{w}}}\" in\n\
             \x20 *[!0-9]*) echo \"SWARM_WORKERS must be a whole number from 1 to {w}, not '$SWARM_WORKERS'\"; exit 1 ;;\n\
             esac\n\
             if [ \"${{SWARM_WORKERS:-{w}}}\" -lt 1 ] || [ \"${{SWARM_WORKERS:-{w}}}\" -gt {w} ]; then\n\
             \x20 echo \"SWARM_WORKERS must be between 1 and {w} (the file's parallel), not $SWARM_WORKERS\"; exit 1\n\
             fi"
        ),
    );
    install_item(out, o, true);
    refs_item(out);
    push_credential_item(out);
    script_item(out, "# Create the swarm (changes nothing when it exists).\ngit swarm init");
}

/// The template of the jobs that run agents: every step before the runner, in the shell the runner then runs in.
fn runner_section(out: &mut String, o: &Options) {
    let w = o.workers;
    // What the runner jobs share, before their own script (GitLab runs `before_script` and `script` in one shell).
    let _ = writeln!(
        out,
        "\n# What the jobs that run agents share: every step before the runner, in the shell the runner then runs in.\n\
         .git-swarm-runner:\n  extends: .git-swarm-job\n  stage: test\n  needs: [prepare]"
    );
    if let Some(i) = &o.image {
        let _ = writeln!(out, "  image: {i}");
    }
    let _ = writeln!(out, "  timeout: {} minutes", o.timeout_minutes);
    if let Some(e) = &o.environment {
        // CI/CD variables scoped to this environment (the agents' keys) reach these jobs alone; `access`: no
        // deployment is recorded.
        let _ = writeln!(out, "  environment:\n    name: {e}\n    action: access");
    }
    out.push_str("  before_script:\n");
    script_item(
        out,
        &format!(
            "# Worker jobs past SWARM_WORKERS (of the {w} this file runs at most) end here.\n\
             if [ \"${{CI_NODE_INDEX:-1}}\" -gt \"${{SWARM_WORKERS:-{w}}}\" ]; then\n\
             \x20 echo \"worker $CI_NODE_INDEX is not needed (SWARM_WORKERS=$SWARM_WORKERS)\"; exit 0\n\
             fi"
        ),
    );
    install_item(out, o, false);
    agent_cli_item(out, o);
    sandbox_item(out, o);
    refs_item(out);
    setup_items(out, o);
    push_credential_item(out);
}

/// The jobs of the roles: the workers (`parallel`), the planner and the judge.
fn roles_section(out: &mut String, o: &Options) {
    let w = o.workers;
    let _ = write!(out, "\nworker:\n  extends: .git-swarm-runner\n  parallel: {w}\n  script:\n");
    if o.planner {
        wait_item(out);
    }
    script_item(
        out,
        &format!(
            "# Work the board (exec: a cancel or a time-out signals the runner, which releases its claims).\n\
             export GIT_SWARM_AGENT=\"gl-$CI_JOB_ID-w$CI_NODE_INDEX\"\n\
             {}",
            runner_command("worker", o.agents_per_job)
        ),
    );
    if o.planner {
        out.push_str("\nplanner:\n  extends: .git-swarm-runner\n  script:\n");
        script_item(
            out,
            "# Plan: a dispatched goal (SWARM_GOAL) that differs from the swarm's replaces it and starts a cycle.\n\
             export GIT_SWARM_AGENT=\"gl-$CI_JOB_ID-planner\"\n\
             if [ -n \"${SWARM_GOAL:-}\" ]; then\n\
             \x20 exec git swarm run planner --until-idle --goal \"$SWARM_GOAL\" --replace-goal\n\
             fi\n\
             exec git swarm run planner --until-idle",
        );
    }
    if o.judge {
        out.push_str("\njudge:\n  extends: .git-swarm-runner\n  script:\n");
        if o.planner {
            wait_item(out);
        }
        script_item(
            out,
            &format!(
                "# Judge the cycles.\nexport GIT_SWARM_AGENT=\"gl-$CI_JOB_ID-judge\"\n{}",
                runner_command("judge", 1)
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const REV: &str = "3d3c42e5aac5ba805825da76410c181273ba90b1";

    fn parse(text: &str) -> Value {
        serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"))
    }

    /// The shell a job runs: its template's `before_script` (the runner jobs') and its `script`.
    fn shell(y: &Value, job: &str) -> String {
        let mut text = String::new();
        if y[job]["extends"] == ".git-swarm-runner" {
            text = script_of(&y[".git-swarm-runner"], "before_script");
        }
        text + "\n" + &script(&y[job])
    }

    fn script_of(job: &Value, key: &str) -> String {
        job[key]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }

    fn script(job: &Value) -> String {
        job["script"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }

    #[test]
    fn the_pipeline_has_the_promised_structure() {
        let mut o = Options::new(8);
        o.install = Source::Git { url: "https://gitlab.com/o/git-swarm".into(), rev: REV.into() };
        o.trust = Some("ab".repeat(32));
        let y = parse(&render(&o).expect("render"));
        let jobs: Vec<&str> = y.as_object().expect("map").keys().map(String::as_str).collect();
        assert_eq!(
            jobs,
            [".git-swarm-job", ".git-swarm-runner", "git-swarm", "prepare", "worker"],
            "(in the map's order)"
        );
        assert!(y.get("stages").is_none() && y.get("workflow").is_none(), "an include changes no stages");
        assert!(y.get("variables").is_none(), "no variable of ours in an including project's pipeline");
        let t = &y["git-swarm"];
        assert_eq!(t["trigger"]["include"][0]["local"], ".gitlab-ci.yml", "the child is this file");
        assert_eq!(t["trigger"]["strategy"], "depend");
        assert_eq!(t["trigger"]["forward"], serde_json::json!({"yaml_variables": false, "pipeline_variables": true}));
        assert_eq!(t["resource_group"], "git-swarm-default");
        let rule = t["rules"][0]["if"].as_str().expect("rule");
        for s in ["api", "trigger", "web", "schedule"] {
            assert!(rule.contains(&format!("$CI_PIPELINE_SOURCE == \"{s}\"")), "{rule}");
        }
        assert!(!rule.contains("push") && !rule.contains("SWARM_FLEET"), "{rule}");
        let tpl = &y[".git-swarm-job"];
        assert_eq!(tpl["rules"][0]["if"], "$CI_PIPELINE_SOURCE == \"parent_pipeline\"");
        assert_eq!(tpl["interruptible"], false);
        assert_eq!(tpl["variables"]["GIT_DEPTH"], "0");
        assert_eq!(tpl["variables"]["GIT_SWARM_TRUST"], "ab".repeat(32));
        assert_eq!(tpl["cache"]["paths"][0], ".git-swarm/bin/");
        assert_eq!(tpl["cache"]["policy"], "pull");
        let key = tpl["cache"]["key"].as_str().expect("key");
        assert!(key.starts_with(&format!("git-swarm-{}-{}-", o.version, &REV[..12])) && !key.contains('/'), "{key}");
        let p = &y["prepare"];
        assert_eq!((p["stage"].as_str(), p["cache"]["policy"].as_str()), (Some("build"), Some("pull-push")));
        assert_eq!(p["image"], "rust:1-bookworm");
        assert_eq!(p["timeout"], "60 minutes");
        let ps = script(p);
        assert!(
            ps.contains(&format!("cargo install --locked --git https://gitlab.com/o/git-swarm --rev {REV} git-swarm"))
        );
        assert!(ps.contains("unset SWARM_PUSH_TOKEN ANTHROPIC_API_KEY OPENAI_API_KEY"), "{ps}");
        assert!(ps.trim_end().ends_with("git swarm init"), "{ps}");
        let r = &y[".git-swarm-runner"];
        assert_eq!((r["stage"].as_str(), r["image"].as_str()), (Some("test"), Some("node:22-bookworm")));
        assert_eq!(r["needs"], serde_json::json!(["prepare"]));
        assert_eq!(r["timeout"], "120 minutes");
        assert!(r.get("environment").is_none());
        let w = &y["worker"];
        assert_eq!((w["parallel"].as_u64(), w["extends"].as_str()), (Some(8), Some(".git-swarm-runner")));
        let ws = shell(&y, "worker");
        assert!(ws.contains("exec git swarm run worker --until-idle") && ws.contains("gl-$CI_JOB_ID-w$CI_NODE_INDEX"));
        assert!(
            ws.contains("git config swarm.run.sandbox required") && ws.contains("remote.$GIT_SWARM_REMOTE.pushurl")
        );
        assert!(!ws.contains("SWARM_GOAL") && !ws.contains("git swarm list"), "no planner, no wait");
        let skip = ws.find("is not needed").expect("the skip");
        assert!(skip < ws.find("cargo install").expect("install"), "a job past SWARM_WORKERS installs nothing");
    }

    /// The scripts of the jobs are POSIX sh: `sh -n` reads every item, and the push credential's lines give git the
    /// URL the design says, and nothing in `.git/config`.
    #[test]
    fn the_scripts_are_sh_and_the_push_url_is_the_tokens() {
        let mut o = Options::new(3);
        o.planner = true;
        o.judge = true;
        o.setup = vec!["echo one\n  echo two".into()];
        o.agent_clis = vec![install::agent_cli("claude").expect("claude"), install::agent_cli("aider").expect("aider")];
        let y = parse(&render(&o).expect("render"));
        for (job, key) in [
            ("prepare", "script"),
            (".git-swarm-runner", "before_script"),
            ("worker", "script"),
            ("planner", "script"),
            ("judge", "script"),
        ] {
            for item in y[job][key].as_array().expect("script") {
                let text = item.as_str().expect("a string");
                let st = std::process::Command::new("sh").args(["-n", "-c", text]).status().expect("sh");
                assert!(st.success(), "{job}: not sh:\n{text}");
            }
        }
        let item = y[".git-swarm-runner"]["before_script"]
            .as_array()
            .expect("script")
            .iter()
            .filter_map(Value::as_str)
            .find(|s| s.contains("pushurl"))
            .expect("credential")
            .to_string();
        let out = std::process::Command::new("sh")
            .args(["-ec", &format!("{item}\nenv")])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("SWARM_PUSH_TOKEN", "glpat-abc")
            .env("CI_SERVER_URL", "https://gitlab.example.org:8443")
            .env("CI_PROJECT_PATH", "acme/tools/widgets")
            .env("GIT_SWARM_REMOTE", "origin")
            .env("GIT_CONFIG_PARAMETERS", "'core.x'='y'")
            .output()
            .expect("sh");
        let env = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{env}");
        let want = "GIT_CONFIG_PARAMETERS='core.x'='y' 'remote.origin.pushurl'=\
                    'https://oauth2:glpat-abc@gitlab.example.org:8443/acme/tools/widgets.git' 'push.pushoption'='ci.skip'";
        assert!(env.lines().any(|l| l == want), "no {want} in:\n{env}");
        // And git reads it so: the push URL of the remote, the push option.
        let dir = tempfile::tempdir().expect("tmp");
        let git = |args: &[&str]| {
            let params = env.lines().find_map(|l| l.strip_prefix("GIT_CONFIG_PARAMETERS=")).unwrap_or_default();
            let o = std::process::Command::new("git")
                .current_dir(dir.path())
                .env("GIT_CONFIG_PARAMETERS", params)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .args(args)
                .output()
                .expect("git");
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        git(&["init", "-q"]);
        assert_eq!(
            git(&["config", "remote.origin.pushurl"]),
            "https://oauth2:glpat-abc@gitlab.example.org:8443/acme/tools/widgets.git"
        );
        assert_eq!(git(&["config", "push.pushOption"]), "ci.skip");
        assert!(!std::fs::read_to_string(dir.path().join(".git/config")).expect("config").contains("glpat"));
        let none = std::process::Command::new("sh").args(["-ec", &item]).env_clear().output().expect("sh");
        assert!(
            !none.status.success() && String::from_utf8_lossy(&none.stdout).contains("SWARM_PUSH_TOKEN is not set")
        );
        // The goal reaches the planner's shell as a variable, never spliced in.
        let plan = shell(&y, "planner");
        assert!(plan.contains("--goal \"$SWARM_GOAL\" --replace-goal"), "{plan}");
        assert!(shell(&y, "worker").contains("git swarm list") && shell(&y, "judge").contains("git swarm list"));
        let clis = shell(&y, "judge");
        assert!(clis.contains("@anthropic-ai/claude-code@2.") && clis.contains("pipx install aider-chat=="), "{clis}");
        assert!(clis.contains("echo one\n    echo two"), "relative indentation kept: {clis}");
    }

    #[test]
    fn include_mode_gates_the_fleet_and_names_its_own_path() {
        let mut o = Options::new(2);
        o.include = true;
        o.path = super::super::INCLUDE_FILE.into();
        o.swarm = "night".into();
        o.tags = vec!["linux".into(), "docker".into()];
        o.environment = Some("agents".into());
        o.image = None;
        o.build_image = None;
        let y = parse(&render(&o).expect("render"));
        assert_eq!(y["git-swarm"]["trigger"]["include"][0]["local"], ".gitlab/git-swarm.yml");
        assert!(y["git-swarm"]["rules"][0]["if"].as_str().is_some_and(|r| r.starts_with("$SWARM_FLEET == \"1\" && (")));
        assert_eq!(y["git-swarm"]["resource_group"], "git-swarm-night");
        assert_eq!(y[".git-swarm-job"]["tags"], serde_json::json!(["linux", "docker"]));
        assert_eq!(y[".git-swarm-job"]["variables"]["GIT_SWARM_SWARM"], "night");
        assert!(y["prepare"].get("image").is_none() && y[".git-swarm-runner"].get("image").is_none());
        assert!(y["prepare"].get("environment").is_none(), "prepare runs no agent");
        assert_eq!(y[".git-swarm-runner"]["environment"], serde_json::json!({"name": "agents", "action": "access"}));
    }

    #[test]
    fn bad_options_name_the_flag() {
        type Change = fn(&mut Options);
        let cases: Vec<(Change, &str)> = vec![
            (|o| o.workers = 0, "--workers"),
            (|o| o.workers = 201, "--workers"),
            (|o| o.agents_per_job = 0, "--agents-per-job"),
            (|o| o.timeout_minutes = 0, "--timeout"),
            (|o| o.swarm = "a b".into(), "--swarm"),
            (|o| o.image = Some("node: 22".into()), "--image"),
            (|o| o.build_image = Some("rust\n1".into()), "--build-image"),
            (|o| o.tags = vec!["a b".into()], "--tag"),
            (|o| o.environment = Some("a: b".into()), "--environment"),
            (|o| o.secrets = vec!["CI_JOB_TOKEN".into()], "--secret"),
            (|o| o.secrets = vec!["SWARM_PUSH_TOKEN".into()], "--secret"),
            (|o| o.secrets = vec!["A-B".into()], "--secret"),
            (|o| o.path = "../x.yml".into(), "--file"),
            (|o| o.path = "x.txt".into(), "--file"),
            (|o| o.sandbox = "off".into(), "--sandbox"),
            (|o| o.install = Source::Command(" ".into()), "--install"),
            (|o| o.setup = vec!["echo \u{1b}[2J".into()], "--setup"),
        ];
        for (change, flag) in cases {
            let mut o = Options::new(4);
            change(&mut o);
            let e = render(&o).expect_err(flag);
            assert_eq!(e.option, flag, "{e}");
        }
        assert!(render(&Options::new(200)).is_ok());
    }
}
