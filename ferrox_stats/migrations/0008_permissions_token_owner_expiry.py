# Access follows the host's permission model (issue 12, items 7 and 8).
#
# ``view_dashboard`` is the live views' permission (migrate creates it; grant it to a
# group); the archive's is the built-in ``view_finishedrequest``. Tokens gain an owner
# (NULL for tokens issued before this migration, which keep working) and an optional
# expiry; both columns are nullable, so adding them rewrites nothing. The owner's
# model is the project's AUTH_USER_MODEL, whatever its key; no database constraint and
# no cascade, since the archive may live on another database than the users.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ferrox_stats', '0007_ingest_identity_namespace'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='finishedrequest',
            options={'ordering': ('-finished_at', '-id'), 'permissions': [('view_dashboard', 'Can view the live telemetry dashboard')], 'verbose_name': 'finished request', 'verbose_name_plural': 'finished requests'},
        ),
        migrations.AddField(
            model_name='apitoken',
            name='expires_at',
            field=models.DateTimeField(blank=True, help_text='Refused from this moment on; empty: never expires.', null=True),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='owner',
            field=models.ForeignKey(blank=True, db_constraint=False, help_text='The user the token acts for; set to whoever issues it in the admin.', null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
    ]
