# The controller image: slim Python, non-root, nothing written at run time (works with
# readOnlyRootFilesystem: true). Every input is pinned, so a rebuild gets the same software:
# - the base image, by exact tag and by digest (both stages, the same image);
# - the runtime dependencies, only from requirements.lock: exact versions, wheels only, every file
#   checked against its sha256, no resolver;
# - the build backend for the project's own wheel: the setuptools/wheel the base image ships.
# How to build, check and move each pin: docs/image.md. The .dockerignore lets only what is COPYed
# below into the build context.
#
# python:3.11.16-slim-bookworm is the tag; the digest is that tag's multi-platform index as
# docker-library/repo-info records it (the build of 2026-09-01). It was taken from that record, not
# pulled: the machine this was written on cannot reach Docker Hub. Check it before relying on it:
#   docker buildx imagetools inspect python:3.11.16-slim-bookworm@sha256:c425d915a89a6dcd3183b1797ad9bd8878caff5a417f6371c8df93c8ea8b727f
FROM python:3.11.16-slim-bookworm@sha256:c425d915a89a6dcd3183b1797ad9bd8878caff5a417f6371c8df93c8ea8b727f AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY upgrader ./upgrader
# The project's own wheel, from its metadata. No build isolation: the base image's setuptools
# (79.0.1) and wheel (0.46.3) build it, nothing is fetched, and --check-build-dependencies fails the
# build if they stop satisfying pyproject.toml's [build-system] requires.
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --check-build-dependencies --wheel-dir /wheels .

FROM python:3.11.16-slim-bookworm@sha256:c425d915a89a6dcd3183b1797ad9bd8878caff5a417f6371c8df93c8ea8b727f
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin upgrader
# Runtime dependencies: exactly the lock (its own layer, rebuilt only when the lock changes).
COPY requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /tmp/requirements.lock \
    && rm /tmp/requirements.lock
# Then the project itself, without touching the index; pip check fails the build if the lock misses
# anything the project or a pinned package requires.
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-deps --no-index /wheels/*.whl \
    && rm -rf /wheels \
    && pip check
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["upgrader"]
CMD ["run", "--policy", "/etc/upgrader/policy.yaml", "--metrics-port", "8080"]
