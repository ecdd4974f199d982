#!/usr/bin/env bash
# Run the demo control plane on its embedded default: SQLite, migrated, with a staff
# login and live sample traffic recorded through the in-process tracker.
set -euo pipefail
cd "$(dirname "$0")/.."

ADDR="${DEMO_ADDR:-127.0.0.1:8000}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 DJANGO_SETTINGS_MODULE=project.settings
unset DATABASE_URL  # the demo is the embedded default; see README to point it elsewhere

if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[demo]" "django>=5.2,<6"

.venv/bin/python manage.py migrate --noinput -v 0
.venv/bin/python manage.py shell -c "
from django.contrib.auth import get_user_model
User = get_user_model()
user, _ = User.objects.get_or_create(username='demo', defaults={'is_staff': True, 'is_superuser': True})
user.is_staff = user.is_superuser = True
user.set_password('demo')
user.save()
"
cat <<MSG

  ferrox_stats demo control plane
  open      http://$ADDR/   (log in as demo / demo)
  admin     http://$ADDR/admin/
  Sample traffic starts when the page is first opened and runs for 10 minutes.

MSG
exec .venv/bin/python manage.py runserver --noreload "$ADDR"
