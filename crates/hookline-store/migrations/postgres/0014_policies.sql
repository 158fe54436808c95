CREATE TABLE policies (
    seq         BIGSERIAL PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    definition  TEXT NOT NULL, -- the JSON the API accepted
    created_at  BIGINT NOT NULL,
    created_by  TEXT
);
