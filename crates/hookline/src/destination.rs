//! Which URLs hookline may send to. A webhook sender makes requests to addresses strangers typed
//! in, so by default it refuses any destination that resolves into the operator's own network:
//! loopback, private, link-local, unique-local, CGNAT, multicast, unspecified, and the
//! IPv4-mapped and NAT64 forms of those. `allow_private_destinations = true` turns this off for
//! local testing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

pub const MAX_URL_LEN: usize = 2048;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DestinationError {
    #[error("url is not a valid absolute URL: {0}")]
    Malformed(String),
    #[error("url must be at most {MAX_URL_LEN} characters")]
    TooLong,
    #[error("url scheme must be http or https, not {0:?}")]
    Scheme(String),
    #[error("url must name a host")]
    NoHost,
    #[error("url host {0:?} does not resolve")]
    Unresolvable(String),
    #[error(
        "url host {host:?} resolves to {addr}, a loopback, private or otherwise internal address; \
         set allow_private_destinations = true only for local testing"
    )]
    Private { host: String, addr: IpAddr },
}

/// Checks a subscriber URL and, unless private destinations are allowed, where it resolves.
pub async fn check_url(raw: &str, allow_private: bool) -> Result<Url, DestinationError> {
    if raw.len() > MAX_URL_LEN {
        return Err(DestinationError::TooLong);
    }
    let url = Url::parse(raw).map_err(|e| DestinationError::Malformed(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(DestinationError::Scheme(url.scheme().to_owned()));
    }
    let host = url.host_str().ok_or(DestinationError::NoHost)?.to_owned();
    if allow_private {
        return Ok(url);
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<IpAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|_| DestinationError::Unresolvable(host.clone()))?
            .map(|a| a.ip())
            .collect(),
    };
    if addrs.is_empty() {
        return Err(DestinationError::Unresolvable(host));
    }
    if let Some(addr) = addrs.into_iter().find(|a| !is_public(*a)) {
        return Err(DestinationError::Private { host, addr });
    }
    Ok(url)
}

/// A destination the guard refused when connecting.
#[derive(Debug, thiserror::Error)]
#[error(
    "destination refused: {host} resolves to {addr}, a loopback, private or otherwise internal \
     address"
)]
pub struct Refused {
    pub host: String,
    pub addr: IpAddr,
}

/// The SSRF guard at connect time, as reqwest's resolver: it resolves each host once, refuses
/// the connection if any address is internal, and hands reqwest exactly the addresses it
/// vetted, so a DNS answer that changes between the check and the connection (rebinding) is
/// never used. A subscriber URL that was public when it was created is checked again on every
/// new connection.
pub struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
                return Err(Box::new(Refused {
                    host,
                    addr: bad.ip(),
                }) as _);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// URLs whose host is an IP address are connected to without resolution; they are checked here.
pub fn refuse_internal_literal(url: &Url) -> Result<(), Refused> {
    let addr = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        _ => return Ok(()),
    };
    if is_public(addr) {
        Ok(())
    } else {
        Err(Refused {
            host: addr.to_string(),
            addr,
        })
    }
}

/// True for addresses on the public internet.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64.0.0/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking 198.18.0.0/15
        || a >= 240) // reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) embeds an IPv4 address in its last 32 bits.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let [.., hi, lo] = s;
        return is_public_v4(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link local fe80::/10
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || s[..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible (deprecated) and ::
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_ranges_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "::127.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "64:ff9b::101:101",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn the_connect_time_guard_refuses_internal_answers() {
        let refused = GuardedResolver
            .resolve("localhost".parse().unwrap())
            .await
            .err()
            .expect("localhost is internal");
        assert!(refused.downcast_ref::<Refused>().is_some(), "{refused}");
        for url in [
            "http://127.0.0.1:9/x",
            "http://[::1]/x",
            "http://[::ffff:10.0.0.1]/x",
        ] {
            assert!(
                refuse_internal_literal(&Url::parse(url).unwrap()).is_err(),
                "{url}"
            );
        }
        assert!(refuse_internal_literal(&Url::parse("http://93.184.216.34/x").unwrap()).is_ok());
        assert!(refuse_internal_literal(&Url::parse("http://example.com/x").unwrap()).is_ok());
    }

    #[tokio::test]
    async fn urls_are_checked() {
        assert!(matches!(
            check_url("ftp://example.com/x", true).await,
            Err(DestinationError::Scheme(_))
        ));
        assert!(matches!(
            check_url("not a url", true).await,
            Err(DestinationError::Malformed(_))
        ));
        assert!(matches!(
            check_url("http://127.0.0.1:9/hook", false).await,
            Err(DestinationError::Private { .. })
        ));
        assert!(matches!(
            check_url("http://[::1]:9/hook", false).await,
            Err(DestinationError::Private { .. })
        ));
        assert!(matches!(
            check_url("http://localhost:9/hook", false).await,
            Err(DestinationError::Private { .. })
        ));
        assert!(check_url("http://127.0.0.1:9/hook", true).await.is_ok());
        let long = format!("http://a.example/{}", "x".repeat(MAX_URL_LEN));
        assert_eq!(check_url(&long, true).await, Err(DestinationError::TooLong));
    }
}
