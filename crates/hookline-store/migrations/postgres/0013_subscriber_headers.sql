ALTER TABLE subscribers ADD COLUMN headers TEXT; -- JSON object, kept like a secret
