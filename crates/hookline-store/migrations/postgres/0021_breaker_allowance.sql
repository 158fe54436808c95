-- NULL: not ramping. An older binary neither reads nor writes it: it closes a breaker to the
-- full cap, as it always did, and an allowance it leaves behind is ended by the next claim that
-- finds it at the cap, or started over by the next close.
ALTER TABLE subscribers ADD COLUMN breaker_allowance INTEGER;
