CREATE TABLE policies (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    definition  TEXT NOT NULL,   -- the JSON the API accepted
    created_at  INTEGER NOT NULL,
    created_by  TEXT
);
