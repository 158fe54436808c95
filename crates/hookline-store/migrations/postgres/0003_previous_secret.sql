-- Secret rotation: the previous secret stays valid for a grace period.
ALTER TABLE subscribers ADD COLUMN previous_secret TEXT;
ALTER TABLE subscribers ADD COLUMN previous_secret_until BIGINT;
