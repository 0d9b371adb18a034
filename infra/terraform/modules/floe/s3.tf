# The object bucket: segments (and later Parquet) under <object_prefix>/.
# Versioning stays off: Floe deletes objects once the compactor has replaced them
# or retention has expired them, and versioning would keep every deleted byte
# (and bill it) forever. Durability comes from S3 itself and the metastore backups.

resource "aws_s3_bucket" "objects" {
  bucket        = var.bucket_name
  bucket_prefix = var.bucket_name == null ? "${var.name}-objects-" : null
  force_destroy = var.bucket_force_destroy
  tags          = local.tags
}

resource "aws_s3_bucket_versioning" "objects" {
  bucket = aws_s3_bucket.objects.id
  versioning_configuration {
    status = "Disabled"
  }
}

resource "aws_s3_bucket_public_access_block" "objects" {
  bucket                  = aws_s3_bucket.objects.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "objects" {
  bucket = aws_s3_bucket.objects.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "objects" {
  bucket = aws_s3_bucket.objects.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    # S3 Bucket Keys cut SSE-KMS requests (and their cost) by ~99%.
    bucket_key_enabled = var.kms_key_arn != null
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "objects" {
  bucket = aws_s3_bucket.objects.id

  # Orphan safety: nothing Floe writes is multipart today, but an interrupted
  # multipart upload (a tool, a future large-object writer) would be billed forever.
  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_days
    }
  }

  # Scratch space: objects under <prefix>/tmp/ are never referenced by the
  # metastore. Uncommitted segments under <prefix>/segments/ are removed by the
  # compactor's orphan GC instead (only the metastore knows which are orphans).
  rule {
    id     = "expire-tmp"
    status = "Enabled"
    filter {
      prefix = "${local.object_prefix}/tmp/"
    }
    expiration {
      days = var.tmp_expiration_days
    }
  }
}

# TLS only.
data "aws_iam_policy_document" "bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.objects.arn,
      "${aws_s3_bucket.objects.arn}/*",
    ]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "objects" {
  bucket = aws_s3_bucket.objects.id
  policy = data.aws_iam_policy_document.bucket.json

  depends_on = [aws_s3_bucket_public_access_block.objects]
}
