"""``wirepipe bench``: the NATS payload study (formats x codecs x levels, every stage timed) on any data."""
