//! Where the statements are: SQL files, one per topic and backend (`sql/sqlite/*.sql`,
//! `sql/postgres/*.sql`), each statement under a line `-- name: NAME` and ended by `;`, as
//! River keeps its queries. Each backend's `queries` module names them as constants
//! ([`statements!`]), read from the files when the crate compiles; a statement that varies is
//! written out once per variant, so every text a backend runs is in its files, whole.
//!
//! Comment lines right after a statement's name say why it is written so; they stay in the
//! file, not in the text the database parses (a statement cache hashes the whole text).
//! Transaction control (`BEGIN`, `COMMIT`, savepoints) stays with the code that holds the
//! transaction, and a few statements name an identifier, which no parameter can carry
//! (`LISTEN` on a schema's channel, the rebuild of an interrupted index): those are built
//! where they run, each said so there.

/// The error a delivery dies with when the event has no version its subscriber accepts.
pub(crate) const UNVERSIONED_ERROR: &str = "no payload version at or below ";

/// The line that names the statement after it.
const NAME_MARK: &[u8] = b"-- name: ";

/// Whether `bytes` holds `pattern` at `at`.
const fn holds_at(bytes: &[u8], at: usize, pattern: &[u8]) -> bool {
    if at + pattern.len() > bytes.len() {
        return false;
    }
    let mut i = 0;
    while i < pattern.len() {
        if bytes[at + i] != pattern[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Where the line after the one at `at` starts (the end of `bytes` if none).
const fn next_line(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && bytes[at] != b'\n' {
        at += 1;
    }
    if at < bytes.len() {
        at + 1
    } else {
        at
    }
}

/// Whether the line at `at` is `-- name: NAME` for `name`.
const fn names(bytes: &[u8], at: usize, name: &[u8]) -> bool {
    if !holds_at(bytes, at, NAME_MARK) || !holds_at(bytes, at + NAME_MARK.len(), name) {
        return false;
    }
    let end = at + NAME_MARK.len() + name.len();
    end == bytes.len() || bytes[end] == b'\n' || bytes[end] == b'\r'
}

/// The statement named `name` in `file`: its lines after its comments, up to the next name,
/// without the `;` that ends it. Evaluated when the crate compiles: a name the file lacks, or
/// a statement not ended by `;`, fails the build.
pub(crate) const fn statement(file: &'static str, name: &str) -> &'static str {
    let (bytes, name) = (file.as_bytes(), name.as_bytes());
    let mut at = 0;
    while at < bytes.len() && !names(bytes, at, name) {
        at = next_line(bytes, at);
    }
    assert!(at < bytes.len(), "no statement of that name in its file");
    at = next_line(bytes, at);
    while holds_at(bytes, at, b"--") {
        at = next_line(bytes, at);
    }
    let mut end = at;
    while end < bytes.len() && !holds_at(bytes, end, NAME_MARK) {
        end = next_line(bytes, end);
    }
    let (_, rest) = bytes.split_at(at);
    let (text, _) = rest.split_at(end - at);
    let text = text.trim_ascii();
    assert!(
        !text.is_empty() && text[text.len() - 1] == b';',
        "a statement ends with `;`"
    );
    let (text, _) = text.split_at(text.len() - 1);
    match std::str::from_utf8(text.trim_ascii_end()) {
        Ok(text) => text,
        Err(_) => panic!("SQL files are UTF-8"),
    }
}

/// Names the statements of a backend's SQL files: `"topic.sql" => { NAME, ... }` makes a
/// constant per name, holding its statement, and (for tests) the list of them all and of the
/// files, so that the test that prepares every statement finds a new one by itself.
macro_rules! statements {
    ($dir:literal; $($file:literal => { $($name:ident),* $(,)? })*) => {
        $($(
            pub(crate) const $name: &str = $crate::sql::statement(
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/", $dir, "/", $file)),
                stringify!($name),
            );
        )*)*

        /// Every statement, by name.
        #[cfg(test)]
        pub(crate) const ALL: &[(&str, &str)] = &[$($((stringify!($name), $name),)*)*];

        /// Every file of statements, by name, with its text.
        #[cfg(test)]
        pub(crate) const FILES: &[(&str, &str)] = &[$((
            $file,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/", $dir, "/", $file)),
        ),)*];

        /// The directory the files are in.
        #[cfg(test)]
        pub(crate) const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sql/", $dir);
    };
}
pub(crate) use statements;

/// Checks a backend's `statements!` against its directory: every file there is listed, and
/// every statement in a listed file has its constant (one the code does not use is dead code,
/// which the build reports). Panics, naming what is missing.
#[cfg(test)]
pub(crate) fn check_listed(dir: &str, files: &[(&str, &str)], all: &[(&str, &str)]) {
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = files.iter().map(|(name, _)| (*name).to_owned()).collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "the files in {dir} and those its queries module lists"
    );
    let mut named: Vec<&str> = files
        .iter()
        .flat_map(|(_, text)| text.lines())
        .filter_map(|line| line.strip_prefix("-- name: "))
        .map(str::trim_end)
        .collect();
    named.sort_unstable();
    let mut constants: Vec<&str> = all.iter().map(|(name, _)| *name).collect();
    constants.sort_unstable();
    assert_eq!(
        named, constants,
        "the statements in {dir} and its queries module's constants"
    );
}

#[cfg(test)]
mod tests {
    use super::statement;

    const FILE: &str = "-- A topic.\n\n-- name: ONE\n-- Why it is so.\nSELECT 1\n  FROM t;\n\n\
                        -- name: ONE_MORE\nSELECT 2; -- the end\n-- name: LAST\r\nSELECT 3;";

    #[test]
    fn a_statement_is_its_lines_after_its_comments_without_its_semicolon() {
        assert_eq!(statement(FILE, "ONE"), "SELECT 1\n  FROM t");
        assert_eq!(statement(FILE, "LAST"), "SELECT 3");
    }

    #[test]
    #[should_panic(expected = "a statement ends with `;`")]
    fn a_comment_after_the_semicolon_is_refused() {
        statement(FILE, "ONE_MORE");
    }

    #[test]
    #[should_panic(expected = "no statement of that name")]
    fn a_name_is_the_whole_name() {
        statement(FILE, "ON");
    }
}
