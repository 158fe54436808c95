//! Pages and cursors: every list pages by a key of its rows, and a cursor is that key.

use crate::*;

/// Turns `limit + 1` rows keyed by their position into a page: the extra row means "more".
pub(crate) fn page<K: std::fmt::Display, T>(mut rows: Vec<(K, T)>, limit: u32) -> Page<T> {
    let next_cursor = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|(key, _)| key.to_string())
    } else {
        None
    };
    Page {
        items: rows.into_iter().map(|(_, item)| item).collect(),
        next_cursor,
    }
}

/// A dead letter's place in the order they are listed and replayed in (oldest dead first,
/// then by key), and its cursor (`dead_at.seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeathPosition(pub i64, pub i64);

impl std::fmt::Display for DeathPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

impl DeathPosition {
    /// Parses a dead-letter cursor as [`page`] wrote it; none starts at the beginning.
    pub fn parse(cursor: Option<String>) -> Result<Self> {
        let Some(c) = cursor else {
            return Ok(DeathPosition(i64::MIN, i64::MIN));
        };
        let parsed = c
            .split_once('.')
            .and_then(|(at, seq)| Some(DeathPosition(at.parse().ok()?, seq.parse().ok()?)));
        parsed.ok_or_else(|| {
            StoreError::Invalid(format!("cursor {c:?} is not a cursor this API returned"))
        })
    }
}

/// An event's place in a search (newest first: accepted later, then the greater id), and its
/// cursor (`accepted_at:id`; an id may hold `:`, the time never does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventPosition(pub i64, pub String);

impl std::fmt::Display for EventPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.0, self.1)
    }
}

impl EventPosition {
    /// Parses a search cursor as [`page`] wrote it; none starts at the newest.
    pub fn parse(cursor: Option<String>) -> Result<Self> {
        let Some(c) = cursor else {
            // Past every time a row can hold, and past every id at that time.
            return Ok(EventPosition(i64::MAX, String::new()));
        };
        let parsed = c
            .split_once(':')
            .and_then(|(at, id)| Some(EventPosition(at.parse().ok()?, id.to_owned())));
        parsed.filter(|p| !p.1.is_empty()).ok_or_else(|| {
            StoreError::Invalid(format!("cursor {c:?} is not a cursor this API returned"))
        })
    }
}

/// Parses a list cursor; every backend pages by its row key.
pub(crate) fn parse_cursor(cursor: Option<String>) -> Result<i64> {
    parse_cursor_in(cursor, ListOrder::OldestFirst)
}

/// Parses the cursor of a list in `order` (no cursor: the first page).
pub(crate) fn parse_cursor_in(cursor: Option<String>, order: ListOrder) -> Result<i64> {
    match cursor {
        None => Ok(order.start()),
        Some(c) => c.parse::<i64>().ok().filter(|v| *v >= 0).ok_or_else(|| {
            StoreError::Invalid(format!("cursor {c:?} is not a cursor this API returned"))
        }),
    }
}

impl ListOrder {
    /// The key before every row in this order.
    fn start(self) -> i64 {
        match self {
            ListOrder::OldestFirst => 0,
            ListOrder::NewestFirst => i64::MAX,
        }
    }
}
