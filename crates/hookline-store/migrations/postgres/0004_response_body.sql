-- The start of each answer, kept with its attempt.
ALTER TABLE attempts ADD COLUMN response_body TEXT;
