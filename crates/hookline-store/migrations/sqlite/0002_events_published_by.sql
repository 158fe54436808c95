-- Who published each event (API token name), so a publish-scoped token reads only its own.
ALTER TABLE events ADD COLUMN published_by TEXT;
