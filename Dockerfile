# Courier's image: the Procfile's processes, run by name (`courier run api`).
# docker-compose.yml builds it; Valkey runs in a container of its own, so the
# embedded store (the `embedded` extra) is not installed here.
FROM python:3.11-slim

RUN useradd --system --create-home --uid 10001 courier \
 && mkdir /data && chown courier /data && chmod 700 /data
WORKDIR /app

# Dependencies first, pinned (constraints.txt, from `./dev lock`): this
# layer is built again only when they change, not on every edit of the source.
COPY constraints.txt ./
RUN pip install --no-cache-dir -r constraints.txt

# Then Courier itself, nothing resolved again.
COPY . .
RUN pip install --no-cache-dir --no-deps . && pip check

USER courier
ENV COURIER_DATA_DIR=/data PYTHONUNBUFFERED=1
ENTRYPOINT ["courier", "run"]
