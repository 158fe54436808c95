//! What a caller's tenant lets it see. A token that names a tenant sees and changes that
//! tenant's objects only: another tenant's is "not found", exactly as an id that does not
//! exist (a 403 would tell it the id is taken), and its lists hold its own. Every other
//! caller is the platform's and sees everything.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::convert::Infallible;

use super::auth::Caller;
use super::ApiError;

/// Whose objects a request may see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tenancy {
    /// The platform's own callers (and every caller when no tokens are configured).
    Platform,
    /// A token or portal session of this tenant.
    Tenant(String),
}

/// What a list reads, after the caller's tenancy and the `tenant_id` it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// Only this tenant's, or (`None`) everyone's.
    Of(Option<String>),
    /// A tenant asked for another tenant's: an empty list, as if that tenant had nothing.
    Nothing,
}

impl<S: Send + Sync> FromRequestParts<S> for Tenancy {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(match parts.extensions.get::<Caller>() {
            Some(Caller {
                tenant: Some(tenant),
                ..
            }) => Tenancy::Tenant(tenant.clone()),
            _ => Tenancy::Platform,
        })
    }
}

impl Tenancy {
    /// The tenant, for a tenant's caller.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Tenancy::Platform => None,
            Tenancy::Tenant(t) => Some(t),
        }
    }

    /// Whether an object of `owner` is the caller's to see.
    pub fn sees(&self, owner: Option<&str>) -> bool {
        match self {
            Tenancy::Platform => true,
            Tenancy::Tenant(t) => owner == Some(t.as_str()),
        }
    }

    /// `object` if the caller may see it, else the same 404 as an id that does not exist
    /// (`what` and `id` name it as the store's `NotFound` does).
    pub fn shown<T: Tenanted>(&self, object: T, what: &str, id: &str) -> Result<T, ApiError> {
        if self.sees(object.tenant()) {
            Ok(object)
        } else {
            Err(ApiError::from(hookline_store::StoreError::NotFound(
                format!("{what} {id:?}"),
            )))
        }
    }

    /// The tenant a new object belongs to: the caller's own (naming another is 403), or for
    /// the platform the one asked for. A `tenant_id` that breaks the id rules is 422.
    pub fn owner(&self, asked: Option<String>) -> Result<Option<String>, ApiError> {
        checked(asked.as_deref())?;
        match (self, asked) {
            (Tenancy::Platform, asked) => Ok(asked),
            (Tenancy::Tenant(mine), None) => Ok(Some(mine.clone())),
            (Tenancy::Tenant(mine), Some(asked)) if asked == *mine => Ok(Some(asked)),
            (Tenancy::Tenant(mine), Some(asked)) => Err(ApiError::forbidden(format!(
                "this token acts for tenant {mine:?}, not {asked:?}"
            ))),
        }
    }

    /// What a list of objects reads when the caller asked for `asked`'s (422 for a
    /// `tenant_id` that breaks the id rules).
    pub fn listing(&self, asked: Option<String>) -> Result<Listing, ApiError> {
        checked(asked.as_deref())?;
        Ok(match (self, asked) {
            (Tenancy::Platform, asked) => Listing::Of(asked),
            (Tenancy::Tenant(mine), None) => Listing::Of(Some(mine.clone())),
            (Tenancy::Tenant(mine), Some(asked)) if asked == *mine => Listing::Of(Some(asked)),
            (Tenancy::Tenant(_), Some(_)) => Listing::Nothing,
        })
    }
}

fn checked(tenant_id: Option<&str>) -> Result<(), ApiError> {
    tenant_id.map_or(Ok(()), super::validate::tenant_id)
}

/// An object that belongs to a tenant (or to none).
pub trait Tenanted {
    fn tenant(&self) -> Option<&str>;
}

macro_rules! tenanted {
    ($($t:ty),*) => {
        $(impl Tenanted for $t {
            fn tenant(&self) -> Option<&str> {
                self.tenant_id.as_deref()
            }
        })*
    };
}

tenanted!(
    hookline_store::Subscriber,
    hookline_store::Event,
    hookline_store::Delivery,
    hookline_store::Replay,
    hookline_store::Resend
);

impl Tenanted for hookline_store::Tenant {
    fn tenant(&self) -> Option<&str> {
        Some(&self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_sees_its_own_and_nothing_else() {
        let acme = Tenancy::Tenant("acme".into());
        assert!(acme.sees(Some("acme")));
        assert!(!acme.sees(Some("globex")));
        assert!(!acme.sees(None));
        assert!(Tenancy::Platform.sees(Some("globex")) && Tenancy::Platform.sees(None));
        #[derive(Debug)]
        struct Of(Option<&'static str>);
        impl Tenanted for Of {
            fn tenant(&self) -> Option<&str> {
                self.0
            }
        }
        assert!(acme.shown(Of(Some("acme")), "subscriber", "a1").is_ok());
        let hidden = acme
            .shown(Of(Some("globex")), "subscriber", "g1")
            .unwrap_err();
        let missing = ApiError::from(hookline_store::StoreError::NotFound(
            "subscriber \"g1\"".into(),
        ));
        assert_eq!(
            (hidden.status, hidden.code, &hidden.message),
            (missing.status, missing.code, &missing.message)
        );

        assert_eq!(acme.owner(None).unwrap().as_deref(), Some("acme"));
        assert_eq!(
            acme.owner(Some("acme".into())).unwrap().as_deref(),
            Some("acme")
        );
        assert_eq!(
            acme.owner(Some("globex".into())).unwrap_err().code,
            "forbidden"
        );
        assert_eq!(Tenancy::Platform.owner(None).unwrap(), None);

        assert_eq!(
            acme.listing(None).unwrap(),
            Listing::Of(Some("acme".into()))
        );
        assert_eq!(
            acme.listing(Some("globex".into())).unwrap(),
            Listing::Nothing
        );
        assert!(acme.listing(Some(String::new())).is_err());
        assert!(Tenancy::Platform.owner(Some("a:b".into())).is_err());
        assert_eq!(
            Tenancy::Platform.listing(Some("globex".into())).unwrap(),
            Listing::Of(Some("globex".into()))
        );
    }
}
