-- decision_id_range: the lowest and highest decision id the store holds (both NULL in a
-- store without decisions), to say which ids exist when one that does not was asked for.
SELECT MIN(decision_id) AS lowest, MAX(decision_id) AS highest
FROM decision;
