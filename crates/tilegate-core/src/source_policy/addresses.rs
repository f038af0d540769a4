//! Addresses an HTTP(S) source may reach: the special (non-public) ranges, judged on IPv4
//! and on IPv6 addresses that carry an IPv4 one, and the ranges a policy allows besides.

use super::PolicyError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address range in CIDR notation (`127.0.0.0/8`, `::1/128`; a bare address is one host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressRange {
    base: IpAddr,
    bits: u8,
}

impl AddressRange {
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        let bad = || {
            PolicyError(format!(
                "`{s}` is not an address range (CIDR, e.g. 10.0.0.0/8)"
            ))
        };
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().map_err(|_| bad())?)),
            None => (s, None),
        };
        let base: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let max = if base.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        if bits > max {
            return Err(bad());
        }
        Ok(Self { base, bits })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.base, canonical(ip)) {
            (IpAddr::V4(b), IpAddr::V4(a)) => prefix_eq(&b.octets(), &a.octets(), self.bits),
            (IpAddr::V6(b), IpAddr::V6(a)) => prefix_eq(&b.octets(), &a.octets(), self.bits),
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (whole, rest) = (usize::from(bits / 8), bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

/// An IPv6 address that carries an IPv4 one (mapped, compatible, NAT64) judged as that IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        // ::ffff:a.b.c.d (mapped), ::ffff:0:a.b.c.d (translated, RFC 2765) and ::a.b.c.d
        // (compatible, deprecated; not :: or ::1).
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => Some(tail),
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(tail),
        // 64:ff9b::/96, the well-known NAT64 prefix.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        _ => None,
    }
}

/// What kind of special (non-public) address `ip` is, if it is one.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            match o {
                [0, ..] => Some("unspecified"),
                [127, ..] => Some("loopback"),
                [10, ..] => Some("private"),
                [172, b, ..] if (16..32).contains(&b) => Some("private"),
                [192, 168, ..] => Some("private"),
                [169, 254, ..] => Some("link-local (cloud metadata)"),
                [100, b, ..] if (64..128).contains(&b) => Some("shared (carrier-grade NAT)"),
                [192, 0, 0, _] => Some("IETF protocol assignment"),
                [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => Some("documentation"),
                [198, b, ..] if b == 18 || b == 19 => Some("benchmarking"),
                [a, ..] if a >= 224 => Some("multicast or reserved"),
                _ => None,
            }
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if v6.is_unspecified() {
                Some("unspecified")
            } else if v6.is_loopback() {
                Some("loopback")
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("unique-local (cloud metadata on fd00:ec2::254)")
            } else if s[0] & 0xffc0 == 0xfe80 || s[0] & 0xffc0 == 0xfec0 {
                Some("link-local")
            } else if s[0] & 0xff00 == 0xff00 {
                Some("multicast")
            } else if s[0] == 0x2001 && s[1] == 0x0db8 {
                Some("documentation")
            } else if s[..3] == [0x64, 0xff9b, 1] {
                // 64:ff9b:1::/48, local-use NAT64 (RFC 8215): a deployment's own translator,
                // into whatever IPv4 network it serves, at any prefix length.
                Some("local-use NAT64")
            } else if s[0] == 0x2001 && s[1] < 0x0200 {
                // 2001::/23, IETF protocol assignments: Teredo (2001::/32, a tunnel to an
                // IPv4 address it carries obfuscated), ORCHID, benchmarking.
                Some("IETF protocol assignment (Teredo, ORCHID, benchmarking)")
            } else if s[0] == 0x2002 {
                // 6to4 carries an IPv4 address in bits 16..48: judge that one.
                let v4 =
                    Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
                special(IpAddr::V4(v4))
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source_policy::SourcePolicy;

    fn p() -> SourcePolicy {
        SourcePolicy::default()
    }

    #[test]
    fn special_addresses_are_refused_public_ones_pass() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "::1",
            "::",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            // Local-use NAT64, Teredo, and an IPv4-translated address (RFC 2765).
            "64:ff9b:1::a00:5",
            "64:ff9b:1:ffff::8.8.8.8",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "::ffff:0:10.0.0.5",
            "::ffff:0:127.0.0.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(p().check_address(ip).is_err(), "{ip} passed");
        }
        for ip in ["8.8.8.8", "172.32.0.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(p().check_address(ip).is_ok(), "{ip} refused");
        }
    }

    #[test]
    fn an_allowed_range_lets_its_addresses_through() {
        let mut pol = p();
        pol.allow_addresses = vec![AddressRange::parse("127.0.0.0/8").unwrap()];
        assert!(pol.check_address("127.0.0.1".parse().unwrap()).is_ok());
        assert!(
            pol.check_address("::ffff:127.0.0.2".parse().unwrap())
                .is_ok()
        );
        assert!(pol.check_address("10.0.0.1".parse().unwrap()).is_err());
        assert!(AddressRange::parse("10.0.0.0/33").is_err());
        assert!(AddressRange::parse("nonsense").is_err());
        assert!(
            AddressRange::parse("10.128.0.0/9")
                .unwrap()
                .contains("10.200.1.1".parse().unwrap())
        );
        assert!(
            !AddressRange::parse("10.128.0.0/9")
                .unwrap()
                .contains("10.1.1.1".parse().unwrap())
        );
    }
}
