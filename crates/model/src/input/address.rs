//! The addresses the EndpointSlice API accepts, checked before planning so that one pod's
//! address can never make a slice write fail.
//!
//! The rules are those of Kubernetes 1.37, `pkg/apis/discovery/validation` (`validateEndpoints`)
//! and `ValidateEndpointIP` in `pkg/apis/core/validation`: an address must parse strictly (no
//! leading zeros, no zone, no prefix length), must not be an IPv4-mapped IPv6 address, and may
//! not be unspecified, loopback, link-local unicast or link-local multicast. Addresses are
//! written in canonical form (`Ipv6Addr`'s `Display` is RFC 5952), as the API requires for IPv6.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why the EndpointSlice API would reject an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum Rejected {
    #[error("may not be unspecified (0.0.0.0, ::)")]
    Unspecified,
    #[error("may not be in the loopback range (127.0.0.0/8, ::1/128)")]
    Loopback,
    #[error("may not be in the link-local range (169.254.0.0/16, fe80::/10)")]
    LinkLocal,
    #[error("may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)")]
    LinkLocalMulticast,
    #[error("must not be an IPv4-mapped IPv6 address (list the IPv4 address itself)")]
    Ipv4Mapped,
}

impl Rejected {
    /// A stable name for logs and metric labels.
    pub fn rule(self) -> &'static str {
        match self {
            Rejected::Unspecified => "unspecified",
            Rejected::Loopback => "loopback",
            Rejected::LinkLocal => "link-local",
            Rejected::LinkLocalMulticast => "link-local-multicast",
            Rejected::Ipv4Mapped => "ipv4-mapped",
        }
    }
}

/// Checks an address as the EndpointSlice API does; `Ok` means a slice may carry it.
pub fn check(ip: IpAddr) -> Result<IpAddr, Rejected> {
    let verdict = match ip {
        IpAddr::V4(v4) => check_v4(v4),
        IpAddr::V6(v6) => check_v6(v6),
    };
    verdict.map(|()| ip)
}

fn check_v4(ip: Ipv4Addr) -> Result<(), Rejected> {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified() {
        Err(Rejected::Unspecified)
    } else if a == 127 {
        Err(Rejected::Loopback)
    } else if a == 169 && b == 254 {
        Err(Rejected::LinkLocal)
    } else if a == 224 && b == 0 && c == 0 {
        Err(Rejected::LinkLocalMulticast)
    } else {
        Ok(())
    }
}

fn check_v6(ip: Ipv6Addr) -> Result<(), Rejected> {
    let o = ip.octets();
    if ip.to_ipv4_mapped().is_some() {
        Err(Rejected::Ipv4Mapped)
    } else if ip.is_unspecified() {
        Err(Rejected::Unspecified)
    } else if ip.is_loopback() {
        Err(Rejected::Loopback)
    } else if o[0] == 0xfe && o[1] & 0xc0 == 0x80 {
        Err(Rejected::LinkLocal)
    } else if o[0] == 0xff && o[1] & 0x0f == 0x02 {
        // Go's net.IP.IsLinkLocalMulticast: multicast with link-local scope, whatever the flags.
        Err(Rejected::LinkLocalMulticast)
    } else {
        Ok(())
    }
}

/// Why an entry of the `ips` list is not an address at all.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unparsable {
    NotAString,
    /// `10.0.0.1/24`: a prefix length.
    Cidr,
    /// `fe80::1%eth0`: a zone.
    Zone,
    /// Anything else, leading zeros (`010.0.0.1`) included.
    NotAnAddress,
}

impl std::fmt::Display for Unparsable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unparsable::NotAString => "is not a string",
            Unparsable::Cidr => "has a prefix length (network-status lists plain addresses)",
            Unparsable::Zone => "has a zone (%...), which an EndpointSlice cannot carry",
            Unparsable::NotAnAddress => "is not an IP address",
        })
    }
}

/// Parses one address strictly, as the API does (surrounding blanks aside).
pub fn parse(text: &str) -> Result<IpAddr, Unparsable> {
    let text = text.trim();
    text.parse::<IpAddr>().map_err(|_| {
        if text.contains('/') {
            Unparsable::Cidr
        } else if text.contains('%') {
            Unparsable::Zone
        } else {
            Unparsable::NotAnAddress
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(text: &str) -> Result<IpAddr, String> {
        let ip = parse(text).map_err(|e| format!("unparsable: {e}"))?;
        check(ip).map_err(|e| e.rule().to_owned())
    }

    /// Each row: an address and what the EndpointSlice API of Kubernetes 1.37 says of it.
    #[test]
    fn addresses_are_judged_as_the_endpointslice_api_does() {
        let table: &[(&str, Result<&str, &str>)] = &[
            ("192.168.2.4", Ok("192.168.2.4")),
            (" 10.1.2.3 ", Ok("10.1.2.3")),
            ("fd00::4", Ok("fd00::4")),
            ("FD00:0:0:0:0:0:0:4", Ok("fd00::4")),
            ("2001:db8::1", Ok("2001:db8::1")),
            ("239.1.2.3", Ok("239.1.2.3")),
            ("ff05::1", Ok("ff05::1")),
            ("224.0.1.1", Ok("224.0.1.1")),
            ("0.0.0.0", Err("unspecified")),
            ("::", Err("unspecified")),
            ("127.0.0.1", Err("loopback")),
            ("127.255.0.9", Err("loopback")),
            ("::1", Err("loopback")),
            ("169.254.1.29", Err("link-local")),
            ("fe80::45", Err("link-local")),
            ("febf::1", Err("link-local")),
            ("224.0.0.31", Err("link-local-multicast")),
            ("ff02::1", Err("link-local-multicast")),
            ("ff12::1", Err("link-local-multicast")),
            ("::ffff:10.60.3.46", Err("ipv4-mapped")),
            ("::ffff:127.0.0.1", Err("ipv4-mapped")),
        ];
        for (text, want) in table {
            let got = verdict(text);
            let want = want
                .map(|ip| ip.parse::<IpAddr>().unwrap())
                .map_err(str::to_owned);
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn what_is_not_an_address_says_why() {
        assert_eq!(parse("10.0.0.1/24"), Err(Unparsable::Cidr));
        assert_eq!(parse("fd00::1/64"), Err(Unparsable::Cidr));
        assert_eq!(parse("fe80::1%eth0"), Err(Unparsable::Zone));
        assert_eq!(parse("010.0.0.1"), Err(Unparsable::NotAnAddress));
        assert_eq!(parse("192.168.2.300"), Err(Unparsable::NotAnAddress));
        assert_eq!(parse(""), Err(Unparsable::NotAnAddress));
        assert!(Unparsable::Cidr.to_string().contains("prefix length"));
    }

    #[test]
    fn canonical_text_is_what_gets_written() {
        let ip = parse("2001:0DB8:0000:0000:0000:0000:0000:0001").unwrap();
        assert_eq!(ip.to_string(), "2001:db8::1");
    }
}
