# The controller image: slim Python, dependencies from the project's own metadata, non-root,
# nothing written at run time (works with readOnlyRootFilesystem: true).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY upgrader ./upgrader
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin upgrader
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["upgrader"]
CMD ["run", "--policy", "/etc/upgrader/policy.yaml", "--metrics-port", "8080"]
