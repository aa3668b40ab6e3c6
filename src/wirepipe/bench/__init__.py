"""``wirepipe bench``: the seed study (formats x codecs x levels, every stage timed) on any data."""
