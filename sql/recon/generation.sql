-- generation: the recon snapshot's identity; every index run that changes anything
-- writes a new one. NULL for an index written before generations existed.
SELECT value FROM recon.recon_meta WHERE key = 'generation';
