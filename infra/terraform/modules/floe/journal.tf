# The journal tier (issue 40), on when journal_zones is set: one S3 Express One
# Zone directory bucket per availability zone. An agent writes each small
# journal object to all of them at once and acknowledges the produce requests in
# it once journal_quorum buckets hold it and the metastore commit returned
# (objectstore/quorum.py); consolidation rewrites journal data into the standard
# bucket (s3.tf) and Floe deletes the journal objects minutes later. So these
# buckets hold minutes of data: the lifecycle rules below are a safety net for
# what a crash leaves behind, not the cleanup.
#
# The agents (and the compactor) get the buckets as FLOE_JOURNAL, one URL per
# bucket in journal_zones order, and the quorum as FLOE_JOURNAL_QUORUM; without
# a journal neither variable is set (local.journal_environment is empty).

locals {
  journal_enabled = length(var.journal_zones) > 0

  # Directory bucket names are <base>--<zone id>--x-s3 (AWS's rule) and unique
  # per zone across all accounts: the default base takes 8 hex characters of the
  # object bucket's (globally unique) name, and stays short enough (<= 41) for
  # the zone suffix to fit in 63 characters.
  journal_bucket_base = coalesce(var.journal_bucket_base, "${var.name}-journal-${substr(sha1(aws_s3_bucket.objects.bucket), 0, 8)}")

  # Same key layout as the standard bucket: everything under <object_prefix>/.
  journal_urls = [
    for zone in var.journal_zones :
    "s3://${aws_s3_directory_bucket.journal[zone].bucket}/${local.object_prefix}?region=${local.region}"
  ]

  # Merged into the agents' and the compactor's environment (ecs.tf via locals.tf, compactor.tf).
  journal_environment = local.journal_enabled ? {
    FLOE_JOURNAL        = join(",", local.journal_urls)
    FLOE_JOURNAL_QUORUM = tostring(var.journal_quorum)
  } : {}
}

resource "aws_s3_directory_bucket" "journal" {
  for_each = toset(var.journal_zones)

  bucket          = "${local.journal_bucket_base}--${each.key}--x-s3"
  data_redundancy = "SingleAvailabilityZone"
  type            = "Directory"
  # Journal objects are transient; a non-empty bucket would otherwise block destroy.
  force_destroy = var.bucket_force_destroy

  location {
    name = each.key
    type = "AvailabilityZone"
  }

  lifecycle {
    precondition {
      condition     = length("${local.journal_bucket_base}--${each.key}--x-s3") <= 63
      error_message = "The journal bucket name ${local.journal_bucket_base}--${each.key}--x-s3 is longer than 63 characters: shorten journal_bucket_base."
    }
  }
}

# Directory buckets are always private (no ACLs, public access blocked, owner
# enforced) and encrypted; this states the encryption explicitly and switches it
# to the module's KMS key when there is one (directory buckets need bucket keys
# for SSE-KMS; the task roles' UseBucketKey statement covers the key).
resource "aws_s3_bucket_server_side_encryption_configuration" "journal" {
  for_each = aws_s3_directory_bucket.journal

  bucket = each.value.bucket
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = var.kms_key_arn != null
  }
}

# Directory buckets support lifecycle expiration by age and aborting multipart
# uploads (no transitions, no versions). Expiration is a safety net only: until
# consolidated, a journal object holds acknowledged data, so the rule's age must
# exceed any consolidation outage (journal_expiration_days, at least 2 days).
resource "aws_s3_bucket_lifecycle_configuration" "journal" {
  for_each = aws_s3_directory_bucket.journal

  bucket = each.value.bucket

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_days
    }
  }

  rule {
    id     = "expire-journal-leftovers"
    status = "Enabled"
    filter {
      prefix = "${local.object_prefix}/"
    }
    expiration {
      days = var.journal_expiration_days
    }
  }
}

# S3 Express One Zone has its own gateway endpoint service (free, like S3's):
# created beside the S3 one (monitoring.tf) on the same route tables.
resource "aws_vpc_endpoint" "s3express" {
  count = local.journal_enabled && length(var.s3_endpoint_route_table_ids) > 0 ? 1 : 0

  vpc_id            = var.vpc_id
  service_name      = "com.amazonaws.${local.region}.s3express"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = var.s3_endpoint_route_table_ids
  tags              = merge(local.tags, { Name = "${var.name}-s3express" })
}
