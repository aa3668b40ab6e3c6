"""Files on disk: which files a path names and the atomic writer (``files``), crash-safe Parquet part folders
(``parts``), and a file whose writes never fail while the disk is full (``spool``)."""
