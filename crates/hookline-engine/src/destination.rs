//! Which URLs hookline may send to. A webhook sender makes requests to addresses strangers typed
//! in, so by default it refuses any destination that resolves into the operator's own network:
//! loopback, private, link-local, unique-local, CGNAT, multicast, unspecified, and the
//! IPv4-mapped and NAT64 forms of those. `allowed_networks` opens exceptions,
//! `allow_private_destinations = true` turns the guard off (local testing), `https_only = true`
//! refuses plain http.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;
use ipnet::IpNet;
use url::Url;

pub const MAX_URL_LEN: usize = 2048;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DestinationError {
    #[error("url is not a valid absolute URL: {0}")]
    Malformed(String),
    #[error("url must be at most {MAX_URL_LEN} characters")]
    TooLong,
    #[error("url scheme must be http or https, not {0:?}")]
    Scheme(String),
    #[error("url must be https: this hookline runs with https_only = true")]
    NotHttps,
    #[error("url must name a host")]
    NoHost,
    #[error(
        "url must not carry credentials (user:password@): they would be shown to every reader \
         of the subscription"
    )]
    Credentials,
    #[error("url host {0:?} does not resolve")]
    Unresolvable(String),
    #[error(
        "url host {host:?} resolves to {addr}, a loopback, private or otherwise internal address; \
         list its network in allowed_networks, or set allow_private_destinations = true only for \
         local testing"
    )]
    Private { host: String, addr: IpAddr },
}

/// Where hookline may connect: the SSRF guard's settings.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// Off (`allow_private_destinations = true`): every address is allowed.
    pub enabled: bool,
    /// Internal networks allowed all the same (`allowed_networks`).
    pub allowed_networks: Vec<IpNet>,
    /// Refuse plain http (`https_only`).
    pub https_only: bool,
}

/// The guards subscribers are held to: the platform's own (`allow_private_destinations`,
/// `allowed_networks`), and tenants', whose endpoints a tenant's token may point anywhere, so
/// what the platform opens for its own receivers is not theirs to reach.
#[derive(Debug, Clone)]
pub struct Guards {
    pub platform: Arc<Guard>,
    pub tenants: Arc<Guard>,
}

/// Where tenants' subscribers may point (`[tenants] destinations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantDestinations {
    /// Public addresses only, whatever the platform allows for its own (the default).
    Public,
    /// Wherever the platform's own may (local testing, or a platform that vets tenants' URLs).
    AsPlatform,
}

impl Guards {
    pub fn new(platform: Guard, tenants: TenantDestinations) -> Self {
        let platform = Arc::new(platform);
        let tenants = match tenants {
            TenantDestinations::AsPlatform => platform.clone(),
            TenantDestinations::Public => Arc::new(Guard {
                enabled: true,
                allowed_networks: Vec::new(),
                https_only: platform.https_only,
            }),
        };
        Guards { platform, tenants }
    }

    /// The guard a subscriber of `tenant` (or of none) is held to.
    pub fn of(&self, tenant: Option<&str>) -> &Arc<Guard> {
        match tenant {
            Some(_) => &self.tenants,
            None => &self.platform,
        }
    }
}

impl Guard {
    /// Whether a connection to `ip` is allowed.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        !self.enabled || is_public(ip) || self.allowed_networks.iter().any(|n| n.contains(&ip))
    }

    fn check_scheme(&self, url: &Url) -> Result<(), DestinationError> {
        match url.scheme() {
            "https" => Ok(()),
            "http" if self.https_only => Err(DestinationError::NotHttps),
            "http" => Ok(()),
            other => Err(DestinationError::Scheme(other.to_owned())),
        }
    }

    /// Checks a subscriber URL, and where it resolves now.
    pub async fn check_url(&self, raw: &str) -> Result<Url, DestinationError> {
        if raw.len() > MAX_URL_LEN {
            return Err(DestinationError::TooLong);
        }
        let url = Url::parse(raw).map_err(|e| DestinationError::Malformed(e.to_string()))?;
        self.check_scheme(&url)?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(DestinationError::Credentials);
        }
        let host = url.host_str().ok_or(DestinationError::NoHost)?.to_owned();
        if !self.enabled {
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
        if let Some(addr) = addrs.into_iter().find(|a| !self.permits(*a)) {
            return Err(DestinationError::Private { host, addr });
        }
        Ok(url)
    }

    /// The checks made right before sending that need no resolution: the scheme (a subscriber
    /// created before `https_only` was set), and URLs whose host is an IP address, which are
    /// connected to without going through the resolver.
    pub fn check_before_send(&self, url: &Url) -> Result<(), String> {
        self.check_scheme(url).map_err(|e| e.to_string())?;
        let addr = match url.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            _ => return Ok(()),
        };
        if self.permits(addr) {
            Ok(())
        } else {
            Err(Refused {
                host: addr.to_string(),
                addr,
            }
            .to_string())
        }
    }
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

/// The SSRF guard at connect time, as the HTTP client's resolver: it resolves each host once,
/// refuses the connection if any address is internal, and hands the connection exactly the
/// addresses it vetted, so a DNS answer that changes between the check and the connection
/// (rebinding) is never used. A subscriber URL that was public when it was created is checked
/// again on every new connection. (A host that is an IP address is never resolved: the sender
/// checks it before sending, `Guard::check_before_send`.)
#[derive(Clone)]
pub struct GuardedResolver {
    guard: Arc<Guard>,
    lookup: Lookup,
}

/// A name's addresses, as the system resolver (or a test's) answers.
pub type Resolving = Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>;

/// How names are resolved: the system resolver, or (in tests) anything else.
pub type Lookup = Arc<dyn Fn(String) -> Resolving + Send + Sync>;

/// Why a name yields no address to connect to: it did not resolve, or the guard refused it.
pub type ResolveError = Box<dyn std::error::Error + Send + Sync>;

impl GuardedResolver {
    pub fn new(guard: Arc<Guard>) -> Self {
        Self::with_lookup(
            guard,
            Arc::new(|host: String| {
                Box::pin(
                    async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.collect()) },
                )
            }),
        )
    }

    pub fn with_lookup(guard: Arc<Guard>, lookup: Lookup) -> Self {
        Self { guard, lookup }
    }

    pub fn resolve(
        &self,
        host: &str,
    ) -> impl Future<Output = Result<Vec<SocketAddr>, ResolveError>> + Send + 'static {
        let host = host.to_owned();
        let guard = self.guard.clone();
        let answer = (self.lookup)(host.clone());
        async move {
            let addrs = answer.await?;
            if let Some(bad) = addrs.iter().find(|a| !guard.permits(a.ip())) {
                return Err(Box::new(Refused {
                    host,
                    addr: bad.ip(),
                }) as _);
            }
            Ok(addrs)
        }
    }
}

/// The resolver hyper's connector calls.
impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = ResolveError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ResolveError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ResolveError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let resolving = self.resolve(name.as_str());
        Box::pin(async move { Ok(resolving.await?.into_iter()) })
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
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    // Forms that translate to, or tunnel through, an embedded IPv4 address: public only when
    // every address embedded is.
    // NAT64 (64:ff9b::/96) embeds an IPv4 address in its last 32 bits.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return is_public_v4(v4(s[6], s[7]));
    }
    // Local-use NAT64 (64:ff9b:1::/48): RFC 6052 puts the address in bits 48 to 88 (around the
    // zero u-octet); some translators use the last 32 bits. Both must be public.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        let ([a, b], [_, c], [d, _]) = (s[3].to_be_bytes(), s[4].to_be_bytes(), s[5].to_be_bytes());
        let rfc6052 = Ipv4Addr::new(a, b, c, d);
        return is_public_v4(rfc6052) && is_public_v4(v4(s[6], s[7]));
    }
    // 6to4 (2002::/16): the tunnel's IPv4 address in bits 16 to 48.
    if s[0] == 0x2002 {
        return is_public_v4(v4(s[1], s[2]));
    }
    // Teredo (2001::/32): the server's address in bits 32 to 64, the client's inverted in the
    // last 32 bits.
    if s[0] == 0x2001 && s[1] == 0 {
        return is_public_v4(v4(s[2], s[3])) && is_public_v4(v4(!s[6], !s[7]));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site local fec0::/10 (deprecated, still routed inside)
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard-only 100::/64
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
            "64:ff9b:1::a9fe:a9fe",
            "64:ff9b:1:a9fe:a9:fe00::",
            "2002:a9fe:a9fe::",
            "2002:7f00:1::1",
            "2001:0:a9fe:a9fe::1",
            "2001:0:4136:e378:8000:63bf:f5ff:fffe", // client 10.0.0.1, inverted
            "fec0::1",
            "100::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "64:ff9b::101:101",
            "2002:5db8:d822::1",
            "2001:0:4136:e378:8000:63bf:fefe:fefe", // Teredo: server 65.54.227.120, client 1.1.1.1
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    fn on() -> Guard {
        Guard {
            enabled: true,
            ..Guard::default()
        }
    }

    fn off() -> Guard {
        Guard::default()
    }

    #[tokio::test]
    async fn the_connect_time_guard_refuses_internal_answers() {
        let resolver = GuardedResolver::new(Arc::new(on()));
        let refused = resolver
            .resolve("localhost")
            .await
            .expect_err("localhost is internal");
        assert!(refused.downcast_ref::<Refused>().is_some(), "{refused}");
        for url in [
            "http://127.0.0.1:9/x",
            "http://[::1]/x",
            "http://[::ffff:10.0.0.1]/x",
        ] {
            assert!(
                on().check_before_send(&Url::parse(url).unwrap()).is_err(),
                "{url}"
            );
            assert!(
                off().check_before_send(&Url::parse(url).unwrap()).is_ok(),
                "{url}"
            );
        }
        for url in ["http://93.184.216.34/x", "http://example.com/x"] {
            assert!(
                on().check_before_send(&Url::parse(url).unwrap()).is_ok(),
                "{url}"
            );
        }
    }

    /// DNS rebinding: the name answers a public address when the subscriber is created and an
    /// internal one later. The resolver vets the answer it hands to the connection, so the
    /// second answer is refused, whatever the first was.
    #[tokio::test]
    async fn an_answer_that_changes_between_check_and_connect_gets_nothing() {
        let answers = Arc::new(std::sync::Mutex::new(vec![
            "127.0.0.1:0",
            "93.184.216.34:0",
        ]));
        let lookup: Lookup = Arc::new(move |_host| {
            let next: SocketAddr = answers.lock().unwrap().pop().unwrap().parse().unwrap();
            Box::pin(async move { Ok(vec![next]) })
        });
        let resolver = GuardedResolver::with_lookup(Arc::new(on()), lookup);
        let first = resolver.resolve("rebind.example").await;
        let vetted: Vec<SocketAddr> = match first {
            Ok(addrs) => addrs,
            Err(e) => panic!("public at first: {e}"),
        };
        assert_eq!(vetted, ["93.184.216.34:0".parse().unwrap()]);
        let second = resolver.resolve("rebind.example").await;
        let refused = second.expect_err("internal on the second answer");
        assert!(refused.to_string().contains("127.0.0.1"), "{refused}");
    }

    #[tokio::test]
    async fn allowed_networks_open_exceptions_and_https_only_closes_http() {
        let guard = Guard {
            enabled: true,
            allowed_networks: vec!["127.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()],
            https_only: false,
        };
        assert!(guard.permits("127.0.0.1".parse().unwrap()));
        assert!(
            guard.permits("::ffff:127.0.0.1".parse().unwrap()),
            "mapped forms count too"
        );
        assert!(guard.permits("fd12::1".parse().unwrap()));
        assert!(!guard.permits("10.0.0.1".parse().unwrap()));
        assert!(guard.check_url("http://127.0.0.1:9/hook").await.is_ok());
        assert!(guard.check_url("http://10.0.0.1/hook").await.is_err());
        let strict = Guard {
            https_only: true,
            ..on()
        };
        assert_eq!(
            strict.check_url("http://93.184.216.34/x").await,
            Err(DestinationError::NotHttps)
        );
        assert!(strict.check_url("https://93.184.216.34/x").await.is_ok());
        let url = Url::parse("http://93.184.216.34/x").unwrap();
        assert!(strict
            .check_before_send(&url)
            .unwrap_err()
            .contains("https"));
    }

    #[tokio::test]
    async fn urls_are_checked() {
        assert!(matches!(
            off().check_url("ftp://example.com/x").await,
            Err(DestinationError::Scheme(_))
        ));
        assert!(matches!(
            off().check_url("not a url").await,
            Err(DestinationError::Malformed(_))
        ));
        for url in [
            "http://127.0.0.1:9/hook",
            "http://[::1]:9/hook",
            "http://localhost:9/hook",
        ] {
            assert!(
                matches!(
                    on().check_url(url).await,
                    Err(DestinationError::Private { .. })
                ),
                "{url}"
            );
        }
        assert!(off().check_url("http://127.0.0.1:9/hook").await.is_ok());
        for url in [
            "http://user:pw@127.0.0.1:9/hook",
            "http://user@127.0.0.1:9/hook",
        ] {
            assert_eq!(
                off().check_url(url).await,
                Err(DestinationError::Credentials),
                "{url}"
            );
        }
        let long = format!("http://a.example/{}", "x".repeat(MAX_URL_LEN));
        assert_eq!(off().check_url(&long).await, Err(DestinationError::TooLong));
    }
}
