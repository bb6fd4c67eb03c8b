//! A user as the engine's `exec` takes it (`name`, `uid`, `name:group`, `uid:gid`), resolved
//! with the container's `/etc/passwd` and `/etc/group` as the engine resolves it.

/// Who the tests run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: those that list the user by name.
    pub groups: Vec<u32>,
    pub home: String,
}

impl User {
    pub fn root() -> User {
        User { uid: 0, gid: 0, groups: Vec::new(), home: "/root".into() }
    }
}

/// Resolves `spec` against the two files' texts.
pub fn resolve(spec: &str, passwd: &str, group: &str) -> Result<User, String> {
    let (user, group_part) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 6 && (f[0] == user || (user.parse::<u32>().is_ok() && f[2] == user)));
    let (uid, mut gid, name, home) = match (&entry, user.parse::<u32>()) {
        (Some(f), _) => (
            f[2].parse().map_err(|_| format!("/etc/passwd: bad uid for {user}"))?,
            f[3].parse().map_err(|_| format!("/etc/passwd: bad gid for {user}"))?,
            Some(f[0].to_string()),
            f[5].to_string(),
        ),
        (None, Ok(uid)) => (uid, 0, None, "/".to_string()),
        (None, Err(_)) => return Err(format!("no user {user:?} in /etc/passwd")),
    };
    let groups: Vec<Vec<&str>> =
        group.lines().map(|l| l.split(':').collect()).filter(|f: &Vec<&str>| f.len() >= 4).collect();
    if let Some(g) = group_part.filter(|g| !g.is_empty()) {
        gid = match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => groups
                .iter()
                .find(|f| f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| format!("no group {g:?} in /etc/group"))?,
        };
    }
    let mut supplementary = vec![gid];
    if let Some(name) = &name {
        for f in &groups {
            if f[3].split(',').any(|m| m == name)
                && let Ok(id) = f[2].parse::<u32>()
                && !supplementary.contains(&id)
            {
                supplementary.push(id);
            }
        }
    }
    Ok(User { uid, gid, groups: supplementary, home })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000::/home/agent:/bin/bash\n";
    const GROUP: &str = "root:x:0:\nagent:x:1000:\ndocker:x:999:agent,other\ntests:x:2000:\n";

    #[test]
    fn users_resolve_as_the_engine_resolves_them() {
        let agent = resolve("agent", PASSWD, GROUP).unwrap();
        assert_eq!(
            (agent.uid, agent.gid, agent.groups.clone(), agent.home.as_str()),
            (1000, 1000, vec![1000, 999], "/home/agent")
        );
        assert_eq!(resolve("1000", PASSWD, GROUP).unwrap(), agent);
        let grouped = resolve("agent:tests", PASSWD, GROUP).unwrap();
        assert_eq!((grouped.gid, grouped.groups), (2000, vec![2000, 999]));
        let unknown = resolve("4242:7", PASSWD, GROUP).unwrap();
        assert_eq!((unknown.uid, unknown.gid, unknown.home.as_str()), (4242, 7, "/"));
        assert!(resolve("nobody-here", PASSWD, GROUP).is_err());
        assert!(resolve("agent:nogroup", PASSWD, GROUP).is_err());
    }
}
