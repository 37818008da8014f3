# The application image: web, worker and beat all run from it (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# DejaVu Sans: the Unicode font the receipt PDFs are set in (RECEIPT_FONT).
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends fonts-dejavu-core \
    && rm -rf /var/lib/apt/lists/*

COPY requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock

COPY . .
# The benchmark and the split-test command as the one file each a host gets (var/shipped/).
RUN DJANGO_DEBUG=0 DJANGO_SECRET_KEY=build-only python manage.py collectstatic --noinput \
    && python provisioning/validation/build.py \
    && useradd --system --home /app gpulots && mkdir -p /app/var && chown -R gpulots /app/var
USER gpulots

EXPOSE 8000
CMD ["gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4"]
