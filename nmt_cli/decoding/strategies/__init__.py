"""Search strategies, one module each, registered in :data:`nmt_cli.registry.SEARCH_STRATEGIES`
(``decode.search``); :mod:`.base` holds what they share."""
