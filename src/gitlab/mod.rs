//! git swarm on GitLab CI: the pipeline file that runs a fleet of runner jobs ([`pipeline`]) and the REST client that
//! starts it and lists its pipelines ([`api`]). What every CI generator shares (the install of git-swarm and the
//! agents' CLIs, the local-path refusal, the push budget) is [`crate::fleet`].
//!
//! No terminal I/O here; the CLI (`src/cli/ci/gitlab.rs`, `dispatch.rs`, `runs.rs`) prints.

pub(crate) mod api;
pub(crate) mod pipeline;

/// Where `ci gitlab` writes the pipeline by default: the project's own CI file.
pub(crate) const CI_FILE: &str = ".gitlab-ci.yml";
/// Where `ci gitlab --include` writes it, for a project's own `.gitlab-ci.yml` to include.
pub(crate) const INCLUDE_FILE: &str = ".gitlab/git-swarm.yml";
/// GitLab.com's API, when neither `GITLAB_API_URL` nor the remote names another server.
pub(crate) const DEFAULT_API_URL: &str = "https://gitlab.com/api/v4";

/// A GitLab project as the API addresses it: its full path (`group/subgroup/name`) or its numeric id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Project {
    Path(String),
    Id(u64),
}

impl std::fmt::Display for Project {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Project::Path(p) => f.write_str(p),
            Project::Id(id) => write!(f, "{id}"),
        }
    }
}

/// GitLab's rule for a path segment (a group or a project): letters, digits, `_`, `-`, `.`; not starting with `-`
/// or `.`, not ending with `.git` or `.atom`.
fn valid_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.starts_with(['-', '.'])
        && !s.ends_with(".git")
        && !s.ends_with(".atom")
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl std::str::FromStr for Project {
    type Err = String;

    /// `group/name` (any depth of subgroups), or a numeric id (what `--project` takes).
    fn from_str(s: &str) -> Result<Self, String> {
        if !s.is_empty() && s.len() <= 20 && s.chars().all(|c| c.is_ascii_digit()) {
            return s.parse().map(Project::Id).map_err(|_| format!("'{s}' is not a project id"));
        }
        let segments: Vec<&str> = s.split('/').collect();
        if s.len() > 1000 || segments.len() < 2 || segments.len() > 21 || !segments.iter().all(|p| valid_segment(p)) {
            return Err(format!(
                "'{}' is not a GitLab project: use its path (group/name, group/subgroup/name) or its numeric id",
                crate::escape::line(s)
            ));
        }
        Ok(Project::Path(s.to_string()))
    }
}

impl Project {
    /// The `:id` of the API's paths: the numeric id, or the path URL-encoded (`group%2Fname`).
    pub(crate) fn api_id(&self) -> String {
        match self {
            Project::Id(id) => id.to_string(),
            // Only letters, digits, `-`, `_`, `.` and `/` reach here (`from_str`).
            Project::Path(p) => p.replace('/', "%2F"),
        }
    }
}

/// What a remote URL says about its GitLab project: the project's path and the API of that server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteProject {
    pub project: Project,
    /// `https://<host>/api/v4` (GitLab.com's for gitlab.com); for an http(s) remote its own scheme and port.
    pub api: String,
}

impl RemoteProject {
    /// The project a remote URL names, and the API beside it: `https://host[:port]/group/name(.git)`,
    /// `git@host:group/name.git`, `ssh://git@host[:port]/group/name.git`. The API of an ssh remote is
    /// `https://<host>/api/v4` (the SSH port is not the web's); of an http(s) remote its scheme, host and port with
    /// `/api/v4`. `None` for a path, `file://` or a URL that names no `group/name`. A server under a relative URL
    /// root (`https://host/gitlab/…`) cannot be told from a subgroup: set `GITLAB_API_URL` and `--project`.
    pub(crate) fn from_remote_url(url: &str) -> Option<RemoteProject> {
        let url = url.trim();
        let (scheme, host, port, path) = if let Some((scheme, rest)) = url.split_once("://") {
            if !matches!(scheme, "https" | "http" | "ssh" | "git+ssh" | "ssh+git") {
                return None;
            }
            let (authority, path) = rest.split_once('/')?;
            // userinfo (a token in an https URL, git@ for ssh) is not part of the host.
            let hostport = authority.rsplit('@').next()?;
            let (host, port) = match hostport.rsplit_once(':') {
                Some((h, p)) if !h.contains(']') || h.ends_with(']') => (h, Some(p)),
                _ => (hostport, None),
            };
            (scheme, host, port, path)
        } else {
            // scp-like `user@host:path`: a ':' before any '/'.
            let (authority, path) = url.split_once(':')?;
            if authority.contains('/') {
                return None;
            }
            let host = authority.rsplit('@').next()?;
            ("ssh", host, None, path)
        };
        let host_ok = !host.is_empty()
            && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '[' | ']' | ':'));
        if !host_ok || port.is_some_and(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit())) {
            return None;
        }
        let path = path.trim_matches('/');
        let path = path.strip_suffix(".git").unwrap_or(path);
        let project: Project = path.parse().ok().filter(|p| matches!(p, Project::Path(_)))?;
        let api = match scheme {
            "http" | "https" => match port {
                Some(p) => format!("{scheme}://{host}:{p}/api/v4"),
                None => format!("{scheme}://{host}/api/v4"),
            },
            _ => format!("https://{host}/api/v4"),
        };
        Some(RemoteProject { project, api })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Project {
        Project::Path(p.into())
    }

    #[test]
    fn projects_from_remote_urls() {
        for (url, project, api) in [
            ("https://gitlab.com/acme/widgets.git", "acme/widgets", "https://gitlab.com/api/v4"),
            ("https://gitlab.com/acme/tools/widgets", "acme/tools/widgets", "https://gitlab.com/api/v4"),
            ("https://gitlab-ci-token:abc@gitlab.com/acme/widgets.git", "acme/widgets", "https://gitlab.com/api/v4"),
            ("git@gitlab.com:acme/widgets.git", "acme/widgets", "https://gitlab.com/api/v4"),
            ("ssh://git@gitlab.example.org:2222/a/b.git", "a/b", "https://gitlab.example.org/api/v4"),
            ("https://git.example.org:8443/a/b/", "a/b", "https://git.example.org:8443/api/v4"),
            ("http://127.0.0.1:8080/group/project.git", "group/project", "http://127.0.0.1:8080/api/v4"),
        ] {
            let got = RemoteProject::from_remote_url(url).unwrap_or_else(|| panic!("{url}"));
            assert_eq!((got.project, got.api.as_str()), (path(project), api), "{url}");
        }
        for url in [
            "/srv/git/r.git",
            "file:///srv/o/r",
            "https://gitlab.com/acme",
            "https://gitlab.com/-/acme/widgets",
            "ftp://gitlab.com/a/b",
            "https://gitlab.com:x/a/b",
            "git@gitlab.com:../b.git",
            "https://gitlab.com/a/b;rm",
        ] {
            assert_eq!(RemoteProject::from_remote_url(url), None, "{url}");
        }
    }

    #[test]
    fn projects_by_path_or_id() {
        assert_eq!("acme/widgets".parse::<Project>(), Ok(path("acme/widgets")));
        assert_eq!("1217".parse::<Project>(), Ok(Project::Id(1217)));
        assert_eq!(path("a/b.c/d_e").api_id(), "a%2Fb.c%2Fd_e");
        assert_eq!(Project::Id(7).api_id(), "7");
        for bad in ["", "acme", "acme/", "/w", "a/b c", "a/.b", "a/-b", "a/b.git", "a/%2F", "a/b?x=1", "a/b#c"] {
            assert!(bad.parse::<Project>().is_err(), "{bad}");
        }
    }
}
