"""diffusion-pipe (tdrussell/diffusion-pipe): its adapter, model table, short-run recipe and largest data bucket."""
