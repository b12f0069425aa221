//! The rules of a `.gitmodules` blob (`fsck_gitmodules_fn`, `check_submodule_name`, `check_submodule_url`,
//! `url_normalize`) and of `.gitattributes`.

use super::*;

/// What git refuses in a `.gitmodules` blob (`fsck_gitmodules_fn`), and what we refuse besides: the first
/// submodule setting at fault.
pub(super) fn gitmodules_rule(data: &[u8]) -> Option<String> {
    let file =
        match gix::config::File::from_bytes_no_includes(data, gix::config::file::Metadata::api(), Default::default()) {
            Ok(file) => file,
            Err(e) => {
                return Some(format!(
                    "a `.gitmodules` that cannot be read as git config ({}) is refused here (git's fsck notes it: \
                     gitmodulesParse)",
                    escape::squash(&e)
                ));
            }
        };
    for section in file.sections() {
        let header = section.header();
        let Some(name) = header.subsection_name() else { continue };
        let body = section.body();
        // git looks at each `submodule.<name>.<key>` it reads: a section with no key is never looked at.
        if !header.name().eq_ignore_ascii_case(b"submodule") || body.num_values() == 0 {
            continue;
        }
        let rule = submodule_name_rule(name)
            .or_else(|| body.values("url").iter().find_map(|url| url_rule(url)))
            .or_else(|| body.values("path").iter().find_map(|path| path_rule(path)))
            .or_else(|| body.values("update").iter().find_map(|update| update_rule(update)));
        if let Some(rule) = rule {
            return Some(format!("a `.gitmodules` whose submodule `{}` {rule}", shown(name)));
        }
    }
    None
}

pub(super) fn is_separator(c: u8) -> bool {
    c == b'/' || c == b'\\'
}

/// A `..` between separators (`/` or `\`, on every platform) or at either end.
pub(super) fn has_dotdot_component(s: &[u8]) -> bool {
    s.split(|c| is_separator(*c)).any(|component| component == b"..")
}

/// Rooted on Unix (`/`), on Windows (`\`, `C:`).
pub(super) fn is_absolute(s: &[u8]) -> bool {
    s.first().is_some_and(|c| is_separator(*c)) || (s.get(1) == Some(&b':') && s[0].is_ascii_alphabetic())
}

/// git's `check_submodule_name`, and ours: a name is a folder under `.git/modules/`.
pub(super) fn submodule_name_rule(name: &[u8]) -> Option<String> {
    if name.is_empty() || has_dotdot_component(name) {
        return Some(
            "has a name that is empty or holds a `..` component: refused by git (fsck: gitmodulesName)".into(),
        );
    }
    if is_absolute(name) {
        return Some("has a name that is an absolute path: refused here".into());
    }
    None
}

/// git's check of `submodule.<name>.path` (`-` first), and ours: a path that climbs out or is absolute.
pub(super) fn path_rule(path: &[u8]) -> Option<String> {
    let quoted = shown(path);
    if path.first() == Some(&b'-') {
        return Some(format!(
            "has path `{quoted}`, which starts with `-` and reads as an option: refused by git (fsck: \
             gitmodulesPath)"
        ));
    }
    if has_dotdot_component(path) || is_absolute(path) {
        return Some(format!("has path `{quoted}`, which leaves the repository: refused here"));
    }
    None
}

/// git's check of `submodule.<name>.update`: a `!command` would run on `git submodule update`.
pub(super) fn update_rule(update: &[u8]) -> Option<String> {
    (update.first() == Some(&b'!')).then(|| {
        format!(
            "has update `{}`, a command `git submodule update` would run: refused by git (fsck: gitmodulesUpdate)",
            shown(update)
        )
    })
}

/// git's `check_submodule_url`, and ours (an `ext::` url, a newline in any kind of url).
pub(super) fn url_rule(url: &[u8]) -> Option<String> {
    let quoted = shown(url);
    let by_git = |why: &str| Some(format!("has url `{quoted}`, {why}: refused by git (fsck: gitmodulesUrl)"));
    let here = |why: &str| Some(format!("has url `{quoted}`, {why}: refused here"));
    if url.first() == Some(&b'-') {
        return by_git("which starts with `-` and reads as an option");
    }
    // A newline, as is or %-escaped: git looks for one where the url may end up in a line that a credential helper
    // reads (relative, git:// and http(s)/ftp(s) urls); we look in every url.
    let escaped_newline = |s: &[u8]| s.windows(3).any(|w| w.eq_ignore_ascii_case(b"%0a"));
    let dot_slash = |s: &[u8]| s.first() == Some(&b'.') && s.get(1).is_some_and(|c| is_separator(*c));
    let dot_dot_slash = |s: &[u8]| s.starts_with(b"..") && s.get(2).is_some_and(|c| is_separator(*c));
    if dot_slash(url) || dot_dot_slash(url) || url.starts_with(b"git://") {
        // git's `url_decode` leaves what comes before the first `:` as it is.
        let decoded = match url.find_byte(b':') {
            Some(colon) if colon > 0 => &url[colon..],
            _ => url,
        };
        if url.contains(&b'\n') || escaped_newline(decoded) {
            return by_git("which holds a newline");
        }
        let mut rest = url;
        let mut climbs = 0;
        loop {
            if dot_dot_slash(rest) {
                climbs += 1;
                rest = &rest[3..];
            } else if dot_slash(rest) {
                rest = &rest[2..];
            } else {
                break;
            }
        }
        if climbs > 0 && matches!(rest.first(), Some(b':' | b'/')) {
            return by_git("whose `../` climbs past the host into `:` or `/` (CVE-2020-11008)");
        }
    } else if let Some(curl) = curl_url(url) {
        if !url_normalizes(curl) {
            return by_git("which git cannot normalize (scheme, host, port, `%` escape or `..`)");
        }
        if escaped_newline(curl) {
            return by_git("which holds a newline");
        }
    } else {
        if url.get(..5).is_some_and(|s| s.eq_ignore_ascii_case(b"ext::")) {
            return here("which runs a command through git's `ext` transport");
        }
        if url.contains(&b'\n') || escaped_newline(url) {
            return here("which holds a newline");
        }
    }
    None
}

/// git's `url_to_curl_url`: the url curl would get, for the transports git hands to curl.
pub(super) fn curl_url(url: &[u8]) -> Option<&[u8]> {
    for helper in [&b"http::"[..], b"https::", b"ftp::", b"ftps::"] {
        if let Some(rest) = url.strip_prefix(helper) {
            return Some(rest);
        }
    }
    [&b"http://"[..], b"https://", b"ftp://", b"ftps://"].iter().any(|scheme| url.starts_with(scheme)).then_some(url)
}

/// git's `append_normalized_escapes` as a check: every `%` starts two hex digits.
pub(super) fn escapes_ok(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            if !s.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// A path segment as `url_normalize` leaves it, as far as `.` and `..` go: `%2e` is a dot, any other byte is not
/// (and never a `/`: an escaped one stays escaped).
pub(super) fn dots_of_segment(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let dot = if s[i] == b'%' {
            let dot = s.get(i + 1..i + 3).is_some_and(|h| h.eq_ignore_ascii_case(b"2e"));
            i += 3;
            dot
        } else {
            i += 1;
            s[i - 1] == b'.'
        };
        out.push(if dot { b'.' } else { b'x' });
    }
    out
}

/// Whether git's `url_normalize` accepts `url` (a url curl would get): a scheme and `://`, a host (but for
/// `file:`), a port from 1 to 65535, `%` escapes of two hex digits, no `..` above the root of the path.
pub(super) fn url_normalizes(url: &[u8]) -> bool {
    let is_scheme = |c: &u8| c.is_ascii_alphanumeric() || b"+.-".contains(c);
    let scheme = url.iter().take_while(|c| is_scheme(c)).count();
    if scheme == 0 || !url[0].is_ascii_alphabetic() || url.get(scheme..scheme + 3) != Some(&b"://"[..]) {
        return false;
    }
    let is_file = url[..scheme].eq_ignore_ascii_case(b"file");
    match authority(&url[scheme + 3..], is_file) {
        Some(path) => path_normalizes(path),
        None => false,
    }
}

/// The part of a url after its `scheme://` past the user, host and port, when `url_normalize` accepts them.
fn authority(mut rest: &[u8], is_file: bool) -> Option<&[u8]> {
    let mut slash = rest.iter().position(|c| b"/?#".contains(c)).unwrap_or(rest.len());
    if let Some(at) = rest.find_byte(b'@')
        && at < slash
    {
        if !escapes_ok(&rest[..at]) {
            return None;
        }
        rest = &rest[at + 1..];
        slash -= at + 1;
    }
    let no_host = rest.first().is_none_or(|c| b":/?#".contains(c));
    if no_host && !is_file {
        return None;
    }
    // The port's `:` is the last one before the path that is not inside an IPv6 literal's `[…]`.
    let mut colon = slash;
    if slash > 0 {
        let mut i = slash - 1;
        while i > 0 && rest[i] != b':' && rest[i] != b']' {
            i -= 1;
        }
        if rest[i] == b':' {
            colon = i;
        }
    }
    if no_host && colon < slash && colon + 1 != slash {
        return None;
    }
    let host = rest.iter().take_while(|c| c.is_ascii_alphanumeric() || b".-_[:]".contains(c)).count();
    if host < colon {
        return None;
    }
    if colon < slash {
        let mut p = colon + 1;
        while p < slash && rest[p] == b'0' {
            p += 1;
        }
        if p == slash && rest[p - 1] == b'0' {
            p -= 1;
        }
        if p != slash {
            let port = &rest[p..slash];
            if !port.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let number = if port.len() <= 5 { port.to_str().ok().and_then(|s| s.parse::<u32>().ok()) } else { None };
            if !number.is_some_and(|n| (1..=65535).contains(&n)) {
                return None;
            }
        }
    }
    Some(&rest[slash..])
}

/// Whether the path of a url (from its first `/`) normalizes as `url_normalize` builds it: each segment reduced to
/// its dots, no `..` with nothing left to remove, `%` escapes of two hex digits.
fn path_normalizes(mut rest: &[u8]) -> bool {
    let mut path = vec![b'/'];
    if rest.first() == Some(&b'/') {
        rest = &rest[1..];
    }
    loop {
        let start = path.len();
        let next = rest.iter().position(|c| b"/?#".contains(c)).unwrap_or(rest.len());
        if !escapes_ok(&rest[..next]) {
            return false;
        }
        path.extend(dots_of_segment(&rest[..next]));
        let mut skip_slash = false;
        if path[start..] == b"."[..] {
            if start == 1 {
                path.truncate(path.len() - 1);
                skip_slash = true;
            } else {
                path.truncate(path.len() - 2);
            }
        } else if path[start..] == b".."[..] {
            let mut previous = path.len() - 3;
            if previous == 0 {
                return false;
            }
            loop {
                previous -= 1;
                if path[previous] == b'/' {
                    break;
                }
            }
            if previous == 0 {
                path.truncate(1);
                skip_slash = true;
            } else {
                path.truncate(previous);
            }
        }
        rest = &rest[next..];
        if rest.first() != Some(&b'/') {
            break;
        }
        rest = &rest[1..];
        if !skip_slash {
            path.push(b'/');
        }
    }
    escapes_ok(rest)
}

/// git's check of a `.gitattributes` blob: the lines it reads (up to a NUL) are shorter than 2048 bytes.
pub(super) fn gitattributes_rule(data: &[u8]) -> Option<String> {
    let text = &data[..data.find_byte(0).unwrap_or(data.len())];
    text.split(|c| *c == b'\n').any(|line| line.len() >= MAX_ATTRIBUTES_LINE).then(|| {
        format!(
            "a `.gitattributes` with a line of {MAX_ATTRIBUTES_LINE} bytes or more is refused by git (fsck: \
             gitattributesLineLength)"
        )
    })
}
