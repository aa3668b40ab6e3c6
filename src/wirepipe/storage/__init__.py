"""Files on disk: which files a path names and the atomic writer (``files``), the one life of a Parquet file
(``lifecycle``: open, write, close, finalize), crash-safe Parquet part folders (``parts``), and a file whose
writes never fail while the disk is full (``spool``)."""
