//! The risks a close reading named beside the trust boundary's main faults (issue 45), each
//! as it reaches the command line: IPv6 spellings of private IPv4 addresses, and a webhook left
//! unsigned.

use std::process::Command;
use tilegate_tests::{tempdir, tilegate_bin};

/// IPv6 forms that carry or reach a private IPv4 network — local-use NAT64 (`64:ff9b:1::/48`),
/// Teredo (`2001::/32`) and the translated form (`::ffff:0:a.b.c.d`) — are refused by the
/// `address` rule, before any request, like the IPv4 they carry.
#[test]
fn ipv6_spellings_of_private_addresses_are_refused() {
    let tmp = tempdir();
    for host in [
        "[64:ff9b:1::a00:5]",
        "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
        "[::ffff:0:127.0.0.1]",
        "[::ffff:0:a9fe:a9fe]",
    ] {
        let out = Command::new(tilegate_bin())
            .arg("--data")
            .arg(tmp.path().join("data"))
            .args(["plan", &format!("http://{host}:8080/x.tif")])
            .env_remove("TILEGATE_SOURCE_POLICY")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{host} planned");
        assert!(
            stderr.contains("error[source-forbidden]") && stderr.contains("(address)"),
            "{host}: {stderr}"
        );
    }
}

/// A webhook with no `TILEGATE_WEBHOOK_SECRET` is said to go unsigned, at start, by every
/// process that delivers to it.
#[test]
fn an_unsigned_webhook_is_said_at_start() {
    let tmp = tempdir();
    let hook = tilegate_tests::webhook::WebhookReceiver::start();
    let out = Command::new(tilegate_bin())
        .arg("--data")
        .arg(tmp.path().join("data"))
        .args(["announce", "--announce", hook.url.as_str()])
        .env_remove("TILEGATE_WEBHOOK_SECRET")
        .env_remove("TILEGATE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("TILEGATE_WEBHOOK_SECRET is not set"),
        "{stderr}"
    );
    let signed = Command::new(tilegate_bin())
        .arg("--data")
        .arg(tmp.path().join("data"))
        .args(["announce", "--announce", hook.url.as_str()])
        .env("TILEGATE_WEBHOOK_SECRET", "s3cret")
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&signed.stderr).contains("is not set"),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );
}
