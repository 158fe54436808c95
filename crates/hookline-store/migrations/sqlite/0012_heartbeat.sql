CREATE TABLE hookline_heartbeat (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    beat_at  INTEGER NOT NULL
);
