"""Keeping tables in shape: one-off passes (``passes``: split, compact, collect garbage until
settled), the continuous maintainer (``continuous``: the ``maintain --loop`` daemon), partition
splitting (``splitting``: a leaf over the threshold becomes two at its median) and garbage
collection (``gc``: unreferenced files, orphans), and checking what a table holds against its
checksums (``verify``: which versions and tags damage breaks)."""
