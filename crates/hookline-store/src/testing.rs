//! Test and benchmark support (feature `testing`): a PostgreSQL schema of one's own, so tests
//! that share one database never see each other's rows.

use tokio_postgres::{Client, NoTls};

/// The database PostgreSQL tests use: `HOOKLINE_TEST_POSTGRES`, or the local test database.
pub fn postgres_url() -> String {
    std::env::var("HOOKLINE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

async fn admin(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL tests need a server at HOOKLINE_TEST_POSTGRES ({url}): {e}")
        });
    tokio::spawn(connection);
    client
}

/// A fresh schema, created on `create` and removed by `drop_schema` (a test that fails leaves
/// it behind for inspection).
pub struct PgSchema {
    base: String,
    pub name: String,
}

impl PgSchema {
    pub async fn create() -> Self {
        let base = postgres_url();
        let name = format!("hl_test_{:016x}", rand::random::<u64>());
        admin(&base)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create a test schema");
        PgSchema { base, name }
    }

    /// The database URL that puts hookline in this schema.
    pub fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-c%20search_path%3D{}", self.base, self.name)
    }

    /// Runs each statement on its own connection-level turn, inside this schema (VACUUM refuses
    /// to share a transaction).
    pub async fn sql(&self, statements: &[&str]) {
        let client = admin(&self.base).await;
        client
            .batch_execute(&format!("SET search_path = {}", self.name))
            .await
            .expect("set search_path");
        for statement in statements {
            client.batch_execute(statement).await.expect(statement);
        }
    }

    pub async fn drop_schema(self) {
        admin(&self.base)
            .await
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name))
            .await
            .expect("drop a test schema");
    }
}
