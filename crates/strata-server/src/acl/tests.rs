//! The ACL rules' unit tests.

use super::*;

#[test]
fn the_last_store_names_the_destination() {
    let args: Vec<&[u8]> = vec![
        b"sort",
        b"abc",
        b"store",
        b"invalid",
        b"store",
        b"stillbad",
        b"store",
        b"def",
    ];
    assert_eq!(sort_store_key(&args), Some(7));
    let args: Vec<&[u8]> = vec![b"sort", b"abc", b"by", b"store", b"limit", b"0", b"1"];
    assert_eq!(sort_store_key(&args), None);
}

fn row(name: &str) -> (usize, &'static Spec) {
    crate::commands::lookup(name.as_bytes()).unwrap()
}

#[test]
fn subcommand_rules_outweigh_their_command_and_go_with_it() {
    let (ci, config) = row("config");
    let (ki, client) = row("client");
    let (si, select) = row("select");
    let mut u = User::new("ops");
    for r in [
        "on",
        "nopass",
        "-@all",
        "+config|get",
        "+client",
        "-client|kill",
        "+select|0",
    ] {
        u.apply(r.as_bytes()).unwrap();
    }
    assert_eq!(u.check(ci, config, &[b"config", b"GET", b"port"]), Ok(()));
    assert_eq!(
        u.check(ci, config, &[b"config", b"set", b"port", b"1"]),
        Err(Denied::Command)
    );
    assert_eq!(u.check(ki, client, &[b"client", b"list"]), Ok(()));
    assert_eq!(
        u.check(ki, client, &[b"client", b"Kill", b"id", b"1"]),
        Err(Denied::Command)
    );
    assert_eq!(u.check(si, select, &[b"select", b"0"]), Ok(()));
    assert_eq!(
        u.check(si, select, &[b"select", b"1"]),
        Err(Denied::Command)
    );
    assert!(!u.unrestricted());
    assert_eq!(
        u.commands_text(),
        "-@all +config|get +client -client|kill +select|0"
    );
    // A rule on a category of the command drops its exceptions, as does one on the
    // whole command, and +@all.
    u.apply(b"-client|kill").unwrap();
    u.apply(b"+@connection").unwrap();
    assert_eq!(
        u.check(ki, client, &[b"client", b"kill", b"id", b"1"]),
        Ok(())
    );
    u.apply(b"-client|kill").unwrap();
    u.apply(b"+client").unwrap();
    assert_eq!(
        u.check(ki, client, &[b"client", b"kill", b"id", b"1"]),
        Ok(())
    );
    u.apply(b"+@all").unwrap();
    assert_eq!(u.check(si, select, &[b"select", b"1"]), Ok(()));
    // CLIENT's operator subcommands are @admin where CLIENT is not.
    u.apply(b"-@admin").unwrap();
    assert_eq!(
        u.check(ki, client, &[b"client", b"kill", b"id", b"1"]),
        Err(Denied::Command)
    );
    assert_eq!(u.check(ki, client, &[b"client", b"id"]), Ok(()));
    // Unknown subcommands, and denying a first argument, are refused.
    assert!(u.apply(b"+config|nosuch").is_err());
    assert!(u.apply(b"-select|0").is_err());
    assert!(u.apply(b"+nosuch|get").is_err());
}

#[test]
fn rules_grant_commands_and_keys_as_redis_does() {
    let mut u = User::new("alice");
    for r in ["on", ">pw", "~a*", "%R~r*", "+get", "+set", "+mget"] {
        u.apply(r.as_bytes()).unwrap();
    }
    assert!(u.accepts(b"pw"));
    assert!(!u.accepts(b"pw2"));
    let (gi, get) = row("get");
    let (si, set) = row("set");
    let (mi, mget) = row("mget");
    let (di, del) = row("del");
    assert_eq!(u.check(gi, get, &[b"get", b"abc"]), Ok(()));
    assert_eq!(u.check(gi, get, &[b"get", b"rx"]), Ok(()));
    assert_eq!(u.check(gi, get, &[b"get", b"b"]), Err(Denied::Key(1)));
    assert_eq!(
        u.check(si, set, &[b"set", b"r1", b"v"]),
        Err(Denied::Key(1))
    );
    assert_eq!(u.check(si, set, &[b"set", b"a1", b"v"]), Ok(()));
    // MGET's second key is checked as its first is.
    assert_eq!(
        u.check(mi, mget, &[b"mget", b"a", b"zz"]),
        Err(Denied::Key(2))
    );
    assert_eq!(u.check(di, del, &[b"del", b"a"]), Err(Denied::Command));
    assert_eq!(
        u.describe(),
        "user alice on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 \
         ~a* %R~r* resetchannels -@all +get +set +mget"
    );
    assert!(!u.unrestricted());
    assert!(User::default_user().unrestricted());
    assert!(u.apply(b"+nosuchcommand").is_err());
    assert!(u.apply(b"#abc").is_err());
}

#[test]
fn key_patterns_match_as_globs_do() {
    let cases: &[&[u8]] = &[b"*", b"a*", b"ab", b"a?c", b"a[bc]*", b"a\\*", b"", b"*b"];
    let keys: &[&[u8]] = &[b"", b"a", b"ab", b"abc", b"a*", b"b", b"acx", b"xb"];
    for &pattern in cases {
        let k = KeyPattern::new(true, true, pattern);
        for &key in keys {
            assert_eq!(
                k.matches(key),
                glob::matches(pattern, key),
                "{pattern:?} {key:?}"
            );
        }
    }
}

#[test]
fn an_acl_file_round_trips() {
    let mut acl = Acl::new();
    let mut u = User::new("bob");
    for r in ["on", ">secret", "%W~w:*", "+@string", "-getdel"] {
        u.apply(r.as_bytes()).unwrap();
    }
    acl.users.insert("bob".into(), Arc::new(u));
    let text = acl.file_text();
    let back = Acl::parse_file(&text, "users.acl").unwrap();
    let again: Vec<String> = back.values().map(|u| u.describe()).collect();
    assert_eq!(again.join("\n") + "\n", text);
    assert!(
        Acl::parse_file("user x bogus\n", "f")
            .unwrap_err()
            .starts_with("f:1:")
    );
}
