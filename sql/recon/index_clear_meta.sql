-- index_clear_meta: recon_meta emptied before a cold build writes its versions.
DELETE FROM recon.recon_meta;
