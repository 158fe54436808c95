-- Events newest first (the search of GET /v1/events), paged by (accepted_at, id).
CREATE INDEX events_accepted ON events (accepted_at, id);
